"""Speech recognition backends behind one interface (:mod:`.base`)."""

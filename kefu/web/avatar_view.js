// What the caller page's avatar box shows (docs/avatar.md): the avatar mode asked for in the
// address (?avatar=video|weights|off), the texts of the box, and whether it shows the
// server's video, the canvas drawn from face weights (avatar_canvas.js) or a status line.
// No DOM, no imports.
//
//   parseAvatarMode(value)       "video" | "weights" | "off" from a URL parameter
//   avatarDisplay(state)         what the avatar box shows: video, canvas or a status line

export const AVATAR_MODES = Object.freeze(["video", "weights", "off"]);

/** The avatar mode of a URL parameter: "video", "weights" or "off"; anything else → fallback. */
export function parseAvatarMode(value, fallback = "video") {
  const mode = String(value || "").trim().toLowerCase();
  return AVATAR_MODES.includes(mode) ? mode : fallback;
}

// --- what the avatar box shows --------------------------------------------------------------

export const AVATAR_TEXT = {
  off: "The avatar is turned off.",
  waiting: "Waiting for the agent's video…",
  noWebgl: "This browser cannot draw the avatar (WebGL is not available). The call works without it.",
  loading: "Loading the avatar…",
  failed: "The avatar could not be shown",
};

/**
 * What the avatar box shows. state: {mode: video|weights|off, videoLive (a live, unmuted
 * video track), weightsActive (weights frames arrived lately), webgl (false when the canvas
 * cannot draw, null when not tried), meshReady, problem (a readable reason the canvas
 * failed, or null)}. Returns {show: "video" | "canvas" | "none", status: text ("" when the
 * picture speaks for itself)}. In video mode the canvas stands in while the server sends
 * weights and no video (a server without a renderer).
 */
export function avatarDisplay({ mode, videoLive = false, weightsActive = false, webgl = null,
                                meshReady = false, problem = null }) {
  if (mode === "off") return { show: "none", status: AVATAR_TEXT.off };
  if (mode === "video" && videoLive) return { show: "video", status: "" };
  const wantCanvas = mode === "weights" || weightsActive;
  if (!wantCanvas) return { show: "none", status: AVATAR_TEXT.waiting };
  if (webgl === false) return { show: "none", status: AVATAR_TEXT.noWebgl };
  if (problem) return { show: "none", status: `${AVATAR_TEXT.failed}: ${problem}` };
  if (!meshReady) return { show: "canvas", status: AVATAR_TEXT.loading };
  return { show: "canvas", status: "" };
}

// What the caller page's avatar box shows (kefu/web/avatar_view.js): the avatar mode from the
// URL and the choice between the video, the canvas and a status line. `node --test tests/web/`.

import { test } from "node:test";
import assert from "node:assert/strict";
import { loadWebModule } from "./avatar_support.mjs";

const { AVATAR_TEXT, avatarDisplay, parseAvatarMode } = await loadWebModule("avatar_view.js");
const { NO_WEBGL_TEXT } = await loadWebModule("avatar_canvas.js");

test("avatar modes from the URL", () => {
  assert.equal(parseAvatarMode("weights"), "weights");
  assert.equal(parseAvatarMode(" OFF "), "off");
  assert.equal(parseAvatarMode("video"), "video");
  assert.equal(parseAvatarMode(null), "video");
  assert.equal(parseAvatarMode("3d"), "video");
});

// --- what the avatar box shows ----------------------------------------------------------------

test("the avatar box shows the video, the canvas or a reason", () => {
  const show = (state) => avatarDisplay(state);
  assert.deepEqual(show({ mode: "off", videoLive: true }), { show: "none", status: AVATAR_TEXT.off });
  assert.deepEqual(show({ mode: "video", videoLive: true, weightsActive: true }), { show: "video", status: "" });
  assert.deepEqual(show({ mode: "video" }), { show: "none", status: AVATAR_TEXT.waiting });
  // No video but weights come (a server without a renderer): the canvas stands in.
  assert.deepEqual(show({ mode: "video", weightsActive: true, meshReady: true }), { show: "canvas", status: "" });
  assert.deepEqual(show({ mode: "weights", videoLive: true, meshReady: true, webgl: true }), { show: "canvas", status: "" });
  assert.deepEqual(show({ mode: "weights" }), { show: "canvas", status: AVATAR_TEXT.loading });
  assert.deepEqual(show({ mode: "weights", webgl: false }), { show: "none", status: NO_WEBGL_TEXT });
  assert.match(NO_WEBGL_TEXT, /WebGL/);
  assert.deepEqual(show({ mode: "weights", problem: "the head model did not load (HTTP 404)" }),
    { show: "none", status: "The avatar could not be shown: the head model did not load (HTTP 404)" });
});

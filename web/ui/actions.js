// What the Memory and Skills pages share: running one action with the page's buttons
// disabled, then reading the page again; a failure shown under what failed.
import { ApiError } from "./api.js";

/** The key of the focused element of `root` (data-focus-key), or null. */
export function focusedKey(root) {
  const a = document.activeElement;
  return a && root.contains(a) && a.dataset ? a.dataset.focusKey || null : null;
}

/** Says `text` to a screen reader through the live region `status`. */
export function say(status, text) {
  status.textContent = "";
  if (text) setTimeout(() => (status.textContent = text), 50);
}

/**
 * Runs one action (`work`, a request) of `view` (a page with `root`, `busy`, `closed`,
 * `errors`, `status`, `reload(focusKey)` and `draw(focusKey)`): its buttons are disabled
 * meanwhile; then `next(answer)` runs (it answers true when it moved to another route, which
 * reads what it shows; else the page is read again) and `done` is said. On a failure: nothing
 * when the page closed or the token was refused (401 signs out); `handled(e)` may take the
 * error (answering true); else `explain(e)` is shown under `key`, and the page is read again
 * when the thing changed meanwhile (404, 409) or drawn again otherwise.
 */
export async function runAction(view, key, work, { done = "", next = null, focusKey = null, explain, handled = null }) {
  if (view.busy) return;
  view.busy = true;
  view.errors.delete(key);
  for (const b of view.root.querySelectorAll("button")) b.disabled = true;
  try {
    const answer = await work();
    const moved = next ? next(answer) : false;
    if (!moved) await view.reload(focusKey);
    say(view.status, done);
  } catch (e) {
    if (view.closed || (e instanceof ApiError && e.status === 401)) return;
    if (handled && handled(e)) return;
    view.errors.set(key, explain(e));
    if (e instanceof ApiError && (e.status === 404 || e.status === 409)) await view.reload(focusKey);
    else view.draw(focusKey);
  } finally {
    view.busy = false;
  }
}

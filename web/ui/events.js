// Follows a session's events over SSE with fetch() and a ReadableStream parser, because
// EventSource cannot send the Authorization header the events route requires (and a token in
// the URL would end up in logs and history). Reconnects with `Last-Event-ID` and `?since=` from
// the last seq handed out, so nothing is shown twice and nothing is skipped.

const BACKOFF_MIN_MS = 500;
const BACKOFF_MAX_MS = 10000;
/** The server sends a keepalive comment after 15 s of silence; twice that and more means dead. */
const SILENCE_MS = 40000;

/** Splits an SSE byte stream into events (https://html.spec.whatwg.org/#event-stream-interpretation). */
export class SseParser {
  constructor(onFrame) {
    this.onFrame = onFrame;
    this.buffer = "";
    this.reset();
  }

  reset() {
    this.data = [];
    this.event = "";
    this.id = null;
  }

  push(text) {
    this.buffer += text;
    let nl;
    while ((nl = this.buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = this.buffer.slice(0, nl);
      const width = this.buffer.startsWith("\r\n", nl) ? 2 : 1;
      // A lone \r at the very end may be the first half of \r\n: wait for the next chunk.
      if (width === 1 && this.buffer[nl] === "\r" && nl === this.buffer.length - 1) break;
      this.buffer = this.buffer.slice(nl + width);
      this.line(line);
    }
  }

  line(line) {
    if (line === "") {
      if (this.data.length > 0) {
        this.onFrame({ id: this.id, event: this.event || "message", data: this.data.join("\n") });
      }
      this.reset();
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "event") this.event = value;
    else if (field === "id" && !value.includes("\0")) this.id = value;
  }
}

/**
 * Follows the events of `sessionId` after seq `since`, calling `onEvent(event)` once per seq in
 * order. `onStatus("live" | "reconnecting")` tells the connection's state. A 401 or 404 stops
 * the follower (`onStop(error)`); anything else is retried with backoff.
 */
export function follow(api, sessionId, since, { onEvent, onStatus = () => {}, onStop = () => {} }) {
  let last = since;
  let stopped = false;
  let controller = null;
  let backoff = BACKOFF_MIN_MS;

  const deliver = (frame) => {
    let ev;
    try {
      ev = JSON.parse(frame.data);
    } catch {
      return;
    }
    if (typeof ev.seq !== "number" || ev.seq <= last) return;
    last = ev.seq;
    backoff = BACKOFF_MIN_MS;
    onEvent(ev);
  };

  async function once() {
    controller = new AbortController();
    let silence = setTimeout(() => controller.abort(), SILENCE_MS);
    const alive = () => {
      clearTimeout(silence);
      silence = setTimeout(() => controller.abort(), SILENCE_MS);
    };
    try {
      const res = await fetch(`/v1/sessions/${encodeURIComponent(sessionId)}/events?since=${last}`, {
        headers: api.headers({ Accept: "text/event-stream", "Last-Event-ID": String(last) }),
        signal: controller.signal,
        cache: "no-store",
      });
      if (res.status === 401 || res.status === 404) {
        stopped = true;
        const body = await res.json().catch(() => null);
        const err = (body && body.error) || { code: `http_${res.status}`, message: "" };
        if (res.status === 401) api.onUnauthorized(err);
        onStop(err);
        return;
      }
      if (!res.ok || !res.body) throw new Error(`events answered ${res.status}`);
      onStatus("live");
      const parser = new SseParser(deliver);
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done || stopped) break;
        alive();
        parser.push(decoder.decode(value, { stream: true }));
      }
    } catch {
      // A dropped connection, an abort or a refused request: reconnect below.
    } finally {
      clearTimeout(silence);
    }
  }

  (async () => {
    while (!stopped) {
      await once();
      if (stopped) break;
      onStatus("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, backoff));
      backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
    }
  })();

  return {
    stop() {
      stopped = true;
      if (controller) controller.abort();
    },
    get lastSeq() {
      return last;
    },
  };
}

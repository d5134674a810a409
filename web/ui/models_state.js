// The Models page as data: what each provider's row says (its place in the order, whether it
// answers the next message, its context window and where that number came from) and the
// sentence shown after a connection, which says truthfully what the new provider does: answer
// the next message, or wait as a fallback (and how to use it now). Pure: no DOM, no fetch;
// unit-tested in test/models_state.test.mjs.

/** Where a provider comes from (`source`). */
export const SOURCE_LABEL = {
  configured: "from the configuration",
  detected: "found on this machine at start",
  connected: "connected here",
};

/** "primary", "fallback 1", "auxiliary": the same words `turnkey doctor` uses. */
export function roleText(p) {
  if (p.role === "primary") return "primary";
  if (p.role === "fallback") return p.order > 1 ? `fallback ${p.order - 1}` : "fallback";
  if (p.role === "auxiliary") return "auxiliary: writes summaries";
  return String(p.role || "");
}

/** "8,192 tokens, read from the server (llama.cpp GET /props)", and the like. */
export function windowText(p) {
  const n = `${Number(p.context_window).toLocaleString("en-US")} tokens`;
  switch (p.context_window_source) {
    case "server":
      return `${n}, read from the server (${p.context_window_read_from})`;
    case "default":
      return `${n}, the default: none set, none read from the server`;
    default:
      return `${n}, configured`;
  }
}

/** The facts line of a row, in order. */
export function rowFacts(p) {
  return [
    `${p.kind} at ${p.base_url}`,
    p.api_key ? `key ${p.api_key}` : "no key",
    `context window ${windowText(p)}`,
    p.vision ? "sees images" : null,
    SOURCE_LABEL[p.source] || p.source,
  ].filter(Boolean);
}

/**
 * What the page says once `added` (the answer of `POST /v1/providers`) is connected, given the
 * base URL that was typed and the list read after it (whose `answers_next` is current).
 */
export function connectedNotice(added, typedBaseUrl, providers) {
  const parts = [`Connected ${added.name} (${added.model}).`];
  if (typedBaseUrl && added.base_url !== typedBaseUrl.replace(/\/+$/, "")) {
    parts.push(`Its base URL is ${added.base_url}.`);
  }
  const next = (providers || []).find((p) => p.answers_next);
  if (added.answers_next || (next && next.name === added.name)) {
    parts.push("It answers the next message.");
  } else if (added.role === "fallback") {
    const who = next ? `${next.name} answers the next message; ` : "";
    parts.push(
      `${who}${added.name} is ${roleText(added)} and answers only when the providers before it fail. ` +
        `To use it now, choose ${added.model_id} in a session's model picker.`,
    );
  } else {
    parts.push(`It is ${roleText(added)}. To use it in a session, choose ${added.model_id} in the model picker.`);
  }
  return parts.join(" ");
}

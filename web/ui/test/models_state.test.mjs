// Unit tests of the Models page's logic (../models_state.js): each provider's role, context
// window and facts, and the notice after a connection (issue 38). Run with
// `node --test web/ui/test/*.test.mjs`.
import test from "node:test";
import assert from "node:assert/strict";
import { connectedNotice, roleText, rowFacts, windowText } from "../models_state.js";

const detected = {
  name: "llamacpp",
  kind: "openai",
  base_url: "http://127.0.0.1:8080/v1",
  model: "smollm2",
  context_window: 8192,
  context_window_source: "server",
  context_window_read_from: "llama.cpp GET /props",
  vision: false,
  api_key: null,
  source: "detected",
  auxiliary: false,
  role: "primary",
  order: 1,
  answers_next: true,
  model_id: "smollm2",
};

const mine = {
  ...detected,
  name: "mine",
  source: "connected",
  role: "fallback",
  order: 2,
  answers_next: false,
  model_id: "mine/smollm2",
};

test("a row says its role in the words doctor uses", () => {
  assert.equal(roleText(detected), "primary");
  assert.equal(roleText(mine), "fallback 1");
  assert.equal(roleText({ ...mine, order: 4 }), "fallback 3");
  assert.equal(roleText({ role: "auxiliary", order: null }), "auxiliary: writes summaries");
});

test("a row says its context window and where the number came from", () => {
  assert.equal(windowText(detected), "8,192 tokens, read from the server (llama.cpp GET /props)");
  assert.equal(
    windowText({ context_window: 128000, context_window_source: "default" }),
    "128,000 tokens, the default: none set, none read from the server",
  );
  assert.equal(windowText({ context_window: 32000, context_window_source: "configured" }), "32,000 tokens, configured");
  assert.deepEqual(rowFacts(detected), [
    "openai at http://127.0.0.1:8080/v1",
    "no key",
    "context window 8,192 tokens, read from the server (llama.cpp GET /props)",
    "found on this machine at start",
  ]);
});

test("a connected fallback is not said to answer the next message, and how to pick it is", () => {
  const text = connectedNotice(mine, "http://127.0.0.1:8080", [detected, mine]);
  assert.match(text, /^Connected mine \(smollm2\)\. Its base URL is http:\/\/127\.0\.0\.1:8080\/v1\./);
  assert.doesNotMatch(text, /It answers the next message/);
  assert.match(text, /llamacpp answers the next message; mine is fallback 1 and answers only when the providers before it fail/);
  assert.match(text, /choose mine\/smollm2 in a session's model picker/);
});

test("a connected primary answers the next message, and a URL typed in full is not repeated", () => {
  const only = { ...mine, role: "primary", order: 1, answers_next: true, model_id: "smollm2" };
  assert.equal(connectedNotice(only, "http://127.0.0.1:8080/v1/", [only]), "Connected mine (smollm2). It answers the next message.");
});

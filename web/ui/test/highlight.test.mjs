// The bundled highlighter: pieces that join back to the text, kinds where they belong.
import test from "node:test";
import assert from "node:assert/strict";
import { tokens } from "../highlight.js";

const kinds = (pieces) => pieces.filter((p) => p.kind).map((p) => `${p.kind}:${p.text}`);

test("a rust line splits into keywords, strings, numbers and comments, and joins back", () => {
  const text = 'fn main() { let x = 42; println!("hi {x}"); } // done';
  const pieces = tokens("rust", text);
  assert.equal(pieces.map((p) => p.text).join(""), text);
  assert.deepEqual(kinds(pieces), ["kw:fn", "kw:let", "num:42", 'str:"hi {x}"', "com:// done"]);
});

test("python comments, escaped quotes and lifetimes in rust are not confused", () => {
  assert.deepEqual(kinds(tokens("py", "def f(): return 'it\\'s' # note")), [
    "kw:def", "kw:return", "str:'it\\'s'", "com:# note",
  ]);
  assert.deepEqual(kinds(tokens("rs", "fn f<'a>(x: &'a str) {}")), ["kw:fn"]);
});

test("an unknown language is left plain, and markup stays text", () => {
  assert.equal(tokens("brainfudge", "+++"), null);
  const pieces = tokens("js", "const s = '<img src=x onerror=alert(1)>';");
  assert.equal(pieces.map((p) => p.text).join(""), "const s = '<img src=x onerror=alert(1)>';");
  assert.deepEqual(kinds(pieces), ["kw:const", "str:'<img src=x onerror=alert(1)>'"]);
});

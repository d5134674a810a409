// A line diff, for showing a change readably: a skill proposal's old and new text, a memory
// change's text before and after. Pure; tested in test/skills.test.mjs.

/** A text's lines; null and "" have none, and a final line break adds no empty line. */
export function splitLines(text) {
  if (typeof text !== "string" || text === "") return [];
  const lines = text.split(/\r\n|\n|\r/);
  if (lines[lines.length - 1] === "") lines.pop();
  return lines;
}

/** Past this many cells (lines × lines) the diff is "all old lines out, all new lines in". */
const DIFF_CELLS = 250000;

/**
 * The lines of `before` and `after` as one list `{op, text}`: `op` " " for a line both have,
 * "-" for one only `before` has, "+" for one only `after` has (a longest common subsequence;
 * in a changed stretch the removed lines come before the added ones).
 */
export function lineDiff(before, after, maxCells = DIFF_CELLS) {
  const a = splitLines(before);
  const b = splitLines(after);
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const same = (text) => ({ op: " ", text });
  const del = (text) => ({ op: "-", text });
  const add = (text) => ({ op: "+", text });
  const x = a.slice(start, endA);
  const y = b.slice(start, endB);
  const middle = [];
  if (x.length * y.length > maxCells) {
    middle.push(...x.map(del), ...y.map(add));
  } else {
    // lcs[i][j]: the longest common subsequence of x[i..] and y[j..].
    const lcs = Array.from({ length: x.length + 1 }, () => new Uint32Array(y.length + 1));
    for (let i = x.length - 1; i >= 0; i--) {
      for (let j = y.length - 1; j >= 0; j--) {
        lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
      }
    }
    let i = 0;
    let j = 0;
    while (i < x.length && j < y.length) {
      if (x[i] === y[j]) {
        middle.push(same(x[i]));
        i++;
        j++;
      } else if (lcs[i + 1][j] >= lcs[i][j + 1]) {
        middle.push(del(x[i++]));
      } else {
        middle.push(add(y[j++]));
      }
    }
    while (i < x.length) middle.push(del(x[i++]));
    while (j < y.length) middle.push(add(y[j++]));
  }
  return [...a.slice(0, start).map(same), ...middle, ...a.slice(endA).map(same)];
}

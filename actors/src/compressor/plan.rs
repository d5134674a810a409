//! Which rows a compression replaces (SPEC R6.2, R6.3): protect the head, keep a tail chosen by
//! token budget (never fewer than `protect_last_n` rows), and summarize what lies between. A
//! boundary never falls between an assistant tool-call row and its results.
use turnkey_storage::{Message, MessageRole};

/// A range of the live rows (wire order, system prompt excluded): `head_end..tail_start` is
/// the middle that the summary replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub head_end: usize,
    pub tail_start: usize,
}

impl Plan {
    pub fn middle(&self) -> std::ops::Range<usize> {
        self.head_end..self.tail_start
    }
}

/// What the plan needs of the configuration and the window.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub protect_first_n: usize,
    pub protect_last_n: usize,
    /// Tokens the kept tail may use beyond its protected rows: `target_ratio × window`.
    pub tail_tokens: u64,
}

/// The plan for `rows`, or `None` when there is nothing worth replacing (fewer than two rows
/// between head and tail, or only an earlier summary).
pub fn plan(rows: &[&Message], budget: Budget, tokens: impl Fn(&Message) -> u64) -> Option<Plan> {
    let len = rows.len();
    let mut head_end = budget.protect_first_n.min(len);
    // Results belong with their call: a head that ends on a call keeps its results.
    while head_end < len && rows[head_end].role == MessageRole::Tool {
        head_end += 1;
    }
    let mut tail_start = len;
    let mut kept_tokens = 0u64;
    let mut kept = 0usize;
    while tail_start > head_end {
        let t = tokens(rows[tail_start - 1]);
        if kept >= budget.protect_last_n && kept_tokens.saturating_add(t) > budget.tail_tokens {
            break;
        }
        tail_start -= 1;
        kept_tokens = kept_tokens.saturating_add(t);
        kept += 1;
    }
    // A tail that starts on a result takes its call (and the call's other results) too.
    while tail_start > head_end && rows[tail_start].role == MessageRole::Tool {
        tail_start -= 1;
    }
    let middle = &rows[head_end..tail_start];
    let fresh = middle.iter().filter(|m| m.summary_epoch.is_none()).count();
    if middle.len() < 2 || fresh == 0 {
        return None;
    }
    Some(Plan {
        head_end,
        tail_start,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use turnkey_storage::{MessageId, SessionId};

    fn row(idx: i64, role: MessageRole, calls: bool) -> Message {
        Message {
            id: MessageId::new(),
            session_id: SessionId::new(),
            idx,
            role,
            content: Some("x".repeat(40)),
            api_content: None,
            tool_calls: calls
                .then(|| serde_json::json!([{"id": "c", "name": "t", "arguments": "{}"}])),
            tool_call_id: (role == MessageRole::Tool).then(|| "c".to_owned()),
            name: None,
            turn_id: None,
            admission_id: None,
            display: None,
            token_estimate: 10,
            created_at: 0,
            compressed_epoch: None,
            summary_epoch: None,
            summary_after_idx: None,
            attachments: None,
        }
    }

    fn budget(first: usize, last: usize, tail_tokens: u64) -> Budget {
        Budget {
            protect_first_n: first,
            protect_last_n: last,
            tail_tokens,
        }
    }

    fn chat(n: usize) -> Vec<Message> {
        (0..n)
            .map(|i| {
                let role = if i % 2 == 0 {
                    MessageRole::User
                } else {
                    MessageRole::Assistant
                };
                row(i as i64 + 1, role, false)
            })
            .collect()
    }

    #[test]
    fn r6_2_head_and_protected_tail_are_kept() {
        let rows = chat(100);
        let refs: Vec<&Message> = rows.iter().collect();
        let p = plan(&refs, budget(3, 20, 0), |m| m.token_estimate as u64).unwrap();
        assert_eq!(
            p,
            Plan {
                head_end: 3,
                tail_start: 80
            }
        );
    }

    #[test]
    fn r6_3_tail_grows_by_token_budget() {
        let rows = chat(100);
        let refs: Vec<&Message> = rows.iter().collect();
        // 20 protected rows use 200 tokens; 100 more tokens buy 10 more rows.
        let p = plan(&refs, budget(3, 20, 300), |m| m.token_estimate as u64).unwrap();
        assert_eq!(p.tail_start, 70);
    }

    #[test]
    fn r6_3_a_tool_pair_is_never_split() {
        let mut rows = chat(40);
        // rows[19] calls a tool, rows[20] and rows[21] are its results: the tail would start at 20.
        rows[19] = row(20, MessageRole::Assistant, true);
        rows[20] = row(21, MessageRole::Tool, false);
        rows[21] = row(22, MessageRole::Tool, false);
        let refs: Vec<&Message> = rows.iter().collect();
        let p = plan(&refs, budget(3, 20, 0), |m| m.token_estimate as u64).unwrap();
        assert_eq!(p.tail_start, 19, "the call joins its results in the tail");
        // A head that ends on a call keeps the call's results.
        let mut rows = chat(40);
        rows[2] = row(3, MessageRole::Assistant, true);
        rows[3] = row(4, MessageRole::Tool, false);
        let refs: Vec<&Message> = rows.iter().collect();
        let p = plan(&refs, budget(3, 20, 0), |m| m.token_estimate as u64).unwrap();
        assert_eq!(p.head_end, 4);
    }

    #[test]
    fn r6_1_nothing_to_compress_is_none() {
        let rows = chat(23);
        let refs: Vec<&Message> = rows.iter().collect();
        assert_eq!(
            plan(&refs, budget(3, 20, 0), |m| m.token_estimate as u64),
            None
        );
        let rows = chat(25);
        let refs: Vec<&Message> = rows.iter().collect();
        assert!(plan(&refs, budget(3, 20, 0), |m| m.token_estimate as u64).is_some());
        // A middle holding only an earlier summary is not worth a call.
        let mut rows = chat(25);
        rows[3].summary_epoch = Some(1);
        rows[4].summary_epoch = Some(2);
        let refs: Vec<&Message> = rows.iter().collect();
        assert_eq!(
            plan(&refs, budget(3, 20, 0), |m| m.token_estimate as u64),
            None
        );
    }
}

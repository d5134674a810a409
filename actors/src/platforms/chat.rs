//! A chat's key: which platform, which chat, which thread. Inbound adapters derive it from an
//! update; the session of the chat is found by it (`chat_sessions`); the outbox sender reads
//! it back to know where a reply goes. The text form is stable (it is stored).
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChatTarget {
    /// `telegram:<chat_id>` or `telegram:<chat_id>:<message_thread_id>` (a forum topic).
    Telegram {
        chat_id: i64,
        thread_id: Option<i64>,
    },
    /// `slack:<team>:<channel>` or `slack:<team>:<channel>:<thread_ts>`.
    Slack {
        team: String,
        channel: String,
        thread_ts: Option<String>,
    },
    /// `webhook:<chat_id>`; the integrator's chat id is taken verbatim (it may hold `:`).
    Webhook { chat_id: String },
}

impl ChatTarget {
    pub fn platform(&self) -> &'static str {
        match self {
            Self::Telegram { .. } => "telegram",
            Self::Slack { .. } => "slack",
            Self::Webhook { .. } => "webhook",
        }
    }

    pub fn key(&self) -> String {
        self.to_string()
    }

    /// Parses a stored key; `None` for anything this build did not write.
    pub fn parse(key: &str) -> Option<Self> {
        let (platform, rest) = key.split_once(':')?;
        match platform {
            "telegram" => {
                let mut parts = rest.split(':');
                let chat_id = parts.next()?.parse().ok()?;
                let thread_id = match parts.next() {
                    Some(t) => Some(t.parse().ok()?),
                    None => None,
                };
                parts
                    .next()
                    .is_none()
                    .then_some(Self::Telegram { chat_id, thread_id })
            }
            "slack" => {
                let mut parts = rest.split(':');
                let team = parts.next().filter(|s| !s.is_empty())?.to_owned();
                let channel = parts.next().filter(|s| !s.is_empty())?.to_owned();
                let thread_ts = parts.next().map(str::to_owned);
                parts.next().is_none().then_some(Self::Slack {
                    team,
                    channel,
                    thread_ts,
                })
            }
            "webhook" if !rest.is_empty() => Some(Self::Webhook {
                chat_id: rest.to_owned(),
            }),
            _ => None,
        }
    }
}

impl fmt::Display for ChatTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Telegram { chat_id, thread_id } => match thread_id {
                Some(t) => write!(f, "telegram:{chat_id}:{t}"),
                None => write!(f, "telegram:{chat_id}"),
            },
            Self::Slack {
                team,
                channel,
                thread_ts,
            } => match thread_ts {
                Some(t) => write!(f, "slack:{team}:{channel}:{t}"),
                None => write!(f, "slack:{team}:{channel}"),
            },
            Self::Webhook { chat_id } => write!(f, "webhook:{chat_id}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ChatTarget;

    #[test]
    fn r1_3_chat_keys_round_trip() {
        for t in [
            ChatTarget::Telegram {
                chat_id: -1001234567890,
                thread_id: None,
            },
            ChatTarget::Telegram {
                chat_id: 42,
                thread_id: Some(7),
            },
            ChatTarget::Slack {
                team: "T1".into(),
                channel: "C2".into(),
                thread_ts: Some("1712345678.000100".into()),
            },
            ChatTarget::Slack {
                team: "T1".into(),
                channel: "D3".into(),
                thread_ts: None,
            },
            ChatTarget::Webhook {
                chat_id: "room:a:b".into(),
            },
        ] {
            assert_eq!(ChatTarget::parse(&t.key()), Some(t.clone()), "{t}");
        }
        for bad in [
            "",
            "telegram:",
            "telegram:x",
            "telegram:1:2:3",
            "slack:T",
            "webhook:",
            "irc:x",
        ] {
            assert_eq!(ChatTarget::parse(bad), None, "{bad}");
        }
    }
}

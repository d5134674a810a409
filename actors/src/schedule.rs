//! Scheduled jobs as rules, without I/O (SPEC R1.5): reading a cron expression, deciding what
//! one schedule does at one moment (wait, fire its latest due time, or pass over a missed one),
//! the `[[schedules]]` configuration entry with its checks and its content-derived id, and the
//! checks of an API request. The `SchedulerActor` (`scheduler.rs`) applies them.
//!
//! Times are UTC and milliseconds since the epoch, like every stored time. Cron has whole
//! seconds, so every due time is a multiple of 1000.
use crate::error::GatewayError;
use crate::limits;
use chrono::{DateTime, Utc};
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use turnkey_storage::{MissedPolicy, ScheduleId, SessionId};

/// The longest cron expression accepted, in characters.
pub const MAX_CRON_CHARS: usize = 256;

/// A parsed cron expression: 5 fields (minute, hour, day of month, month, day of week) or 6
/// with seconds first, evaluated in UTC with POSIX cron's rules (a day matches when the day of
/// month or the day of week does; Sunday is 0 or 7).
#[derive(Clone, Debug)]
pub struct CronSpec(Cron);

impl CronSpec {
    /// Reads `expr`; the error says what is wrong, for a person.
    pub fn parse(expr: &str) -> Result<Self, String> {
        let expr = expr.trim();
        if expr.chars().count() > MAX_CRON_CHARS {
            return Err(format!(
                "the expression is longer than {MAX_CRON_CHARS} characters"
            ));
        }
        let fields = expr.split_whitespace().count();
        if !expr.starts_with('@') && !(5..=6).contains(&fields) {
            return Err(format!(
                "{expr:?} has {fields} fields; expected 5 (minute hour day-of-month month \
                 day-of-week, e.g. \"0 8 * * *\") or 6 with seconds first (e.g. \"*/2 * * * * *\")"
            ));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(expr)
            .map_err(|e| format!("{expr:?} is not a cron expression: {e}"))?;
        let spec = Self(cron);
        if spec.next_after(turnkey_storage::now_ms()).is_none() {
            return Err(format!("{expr:?} never falls due"));
        }
        Ok(spec)
    }

    /// The first due time strictly after `ms`.
    pub fn next_after(&self, ms: i64) -> Option<i64> {
        let from = at_second(ms)?;
        self.0
            .find_next_occurrence(&from, false)
            .ok()
            .map(|t| t.timestamp_millis())
    }

    /// The last due time at or before `ms`.
    pub fn latest_until(&self, ms: i64) -> Option<i64> {
        let until = at_second(ms)?;
        self.0
            .find_previous_occurrence(&until, true)
            .ok()
            .map(|t| t.timestamp_millis())
    }
}

/// `ms` rounded down to its whole second, as a UTC time.
fn at_second(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(ms.div_euclid(1000), 0)
}

/// What one schedule does at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing is due; the next due time (none when the expression never falls due again).
    Wait { next_due: Option<i64> },
    /// Admit the input for due time `due`, then record `due` as handled.
    Fire { due: i64 },
    /// Record `due` as handled without admitting: it fell due before this process started
    /// watching and the schedule says `missed = "skip"`.
    Skip { due: i64 },
}

/// What schedule (`cron`, `missed`, made at `created_at`, last due time handled `last_due`)
/// does at `now` in a process whose scheduler has been running since `watching_since`.
///
/// Only the latest due time not yet handled counts: however many passed (while the process
/// was down, or while admission was refused), the schedule runs at most once for them. A due
/// time at or before `watching_since` fell due while this process was not running: it is
/// *missed*, run once with `run_once` and passed over with `skip`. A later one is on time,
/// even when its admission is late (a slow store, a refused admission being retried).
pub fn step(
    cron: &CronSpec,
    missed: MissedPolicy,
    created_at: i64,
    last_due: Option<i64>,
    watching_since: i64,
    now: i64,
) -> Step {
    let handled_until = last_due.unwrap_or(created_at);
    match cron.latest_until(now) {
        Some(due) if due > handled_until => {
            if due <= watching_since && missed == MissedPolicy::Skip {
                Step::Skip { due }
            } else {
                Step::Fire { due }
            }
        }
        _ => Step::Wait {
            next_due: cron.next_after(handled_until.max(now)),
        },
    }
}

/// The idempotency key (request id) of a firing: one admission per schedule and due time,
/// whichever process or retry makes it.
pub fn request_id(schedule: ScheduleId, due: i64) -> String {
    format!("schedule:{schedule}:{due}")
}

/// A `[[schedules]]` table of the configuration.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleConfig {
    /// The session the input goes to (its id as `POST /v1/sessions` gave it).
    pub session_id: String,
    /// 5 fields, or 6 with seconds first; UTC.
    pub cron: String,
    /// The input's text.
    pub text: String,
    /// `run_once` (default) or `skip`.
    #[serde(default)]
    pub missed: MissedPolicy,
}

/// A `[[schedules]]` entry after its checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedScheduleConfig {
    /// Derived from the content, so a restart finds the same schedule.
    pub id: ScheduleId,
    pub session_id: SessionId,
    pub cron: String,
    pub text: String,
    pub missed: MissedPolicy,
}

impl ScheduleConfig {
    /// Checks the entry at `schedules[index]`; an error is `(key, reason)`.
    pub fn check(&self, index: usize) -> Result<CheckedScheduleConfig, (String, String)> {
        let key = |field: &str| format!("schedules[{index}].{field}");
        let session_id: SessionId = self.session_id.trim().parse().map_err(|_| {
            (
                key("session_id"),
                format!("{:?} is not a session id (a UUID)", self.session_id),
            )
        })?;
        CronSpec::parse(&self.cron).map_err(|reason| (key("cron"), reason))?;
        let text = checked_text(&self.text).map_err(|e| (key("text"), e.to_string()))?;
        let cron = self.cron.trim().to_owned();
        Ok(CheckedScheduleConfig {
            id: config_schedule_id(session_id, &cron, &text, self.missed),
            session_id,
            cron,
            text,
            missed: self.missed,
        })
    }
}

/// Checks every `[[schedules]]` entry; two entries that are the same schedule are refused.
pub fn check_config(
    entries: &[ScheduleConfig],
) -> Result<Vec<CheckedScheduleConfig>, (String, String)> {
    let mut checked: Vec<CheckedScheduleConfig> = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let c = entry.check(i)?;
        if let Some(j) = checked.iter().position(|o| o.id == c.id) {
            return Err((
                format!("schedules[{i}]"),
                format!(
                    "the same schedule as schedules[{j}] (same session, cron, text and missed)"
                ),
            ));
        }
        checked.push(c);
    }
    Ok(checked)
}

/// The id of a configured schedule: a hash of what it is, so the same table gives the same id
/// on every start and every replica, and a changed table is a new schedule.
pub fn config_schedule_id(
    session: SessionId,
    cron: &str,
    text: &str,
    missed: MissedPolicy,
) -> ScheduleId {
    let content = serde_json::json!(["config", session.to_string(), cron, text, missed.as_str()]);
    let digest = Sha256::digest(content.to_string().as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    ScheduleId(uuid::Builder::from_custom_bytes(bytes).into_uuid())
}

/// A schedule's text as an input's: control characters stripped, not empty, within the
/// submission limit (API.md "Input limits").
pub fn checked_text(text: &str) -> Result<String, GatewayError> {
    let clean = limits::sanitize_text(text);
    if clean.trim().is_empty() {
        return Err(GatewayError::InvalidInput {
            code: "empty_input",
            message: "text must not be empty".into(),
        });
    }
    if clean.chars().count() > limits::MAX_TEXT_CHARS {
        return Err(GatewayError::InvalidInput {
            code: "input_too_large",
            message: format!("text is longer than {} characters", limits::MAX_TEXT_CHARS),
        });
    }
    Ok(clean)
}

/// `cron` of an API request, checked (`invalid_cron`).
pub fn checked_cron(cron: &str) -> Result<String, GatewayError> {
    CronSpec::parse(cron)
        .map(|_| cron.trim().to_owned())
        .map_err(|message| GatewayError::InvalidInput {
            code: "invalid_cron",
            message: format!("cron: {message}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-05T08:00:00Z.
    const T0: i64 = 1_796_457_600_000;

    fn spec(expr: &str) -> CronSpec {
        match CronSpec::parse(expr) {
            Ok(s) => s,
            Err(e) => panic!("{expr}: {e}"),
        }
    }

    #[test]
    fn r1_5_t0_is_eight_o_clock_utc() {
        assert_eq!(
            DateTime::from_timestamp_millis(T0).map(|t| t.to_rfc3339()),
            Some("2026-12-05T08:00:00+00:00".to_owned())
        );
    }

    #[test]
    fn r1_5_five_fields_are_minutes_in_utc() {
        let daily = spec("0 8 * * *");
        assert_eq!(daily.next_after(T0 - 1), Some(T0));
        assert_eq!(daily.next_after(T0), Some(T0 + 86_400_000));
        assert_eq!(daily.latest_until(T0 + 1), Some(T0));
        assert_eq!(daily.latest_until(T0 - 1), Some(T0 - 86_400_000));
        // Weekdays are POSIX: 0 and 7 are Sunday. 2026-12-05 is a Saturday.
        assert_eq!(spec("0 8 * * 0").next_after(T0), Some(T0 + 86_400_000));
        assert_eq!(spec("0 8 * * 7").next_after(T0), Some(T0 + 86_400_000));
        assert_eq!(spec("0 8 * * 6").latest_until(T0), Some(T0));
        assert_eq!(spec("30 8 * * *").next_after(T0), Some(T0 + 1_800_000));
        // Names and nicknames, as API.md lists them.
        assert_eq!(spec("0 8 * * SAT").latest_until(T0), Some(T0));
        assert_eq!(spec("0 8 5 DEC *").latest_until(T0), Some(T0));
        assert_eq!(spec("@daily").next_after(T0), Some(T0 + 16 * 3_600_000));
        assert_eq!(spec("@hourly").next_after(T0), Some(T0 + 3_600_000));
    }

    #[test]
    fn r1_5_six_fields_start_with_seconds() {
        let every_2s = spec("*/2 * * * * *");
        assert_eq!(every_2s.next_after(T0), Some(T0 + 2_000));
        assert_eq!(every_2s.next_after(T0 + 1_999), Some(T0 + 2_000));
        assert_eq!(every_2s.next_after(T0 + 2_000), Some(T0 + 4_000));
        assert_eq!(every_2s.latest_until(T0 + 3_999), Some(T0 + 2_000));
        assert_eq!(spec("15 0 8 * * *").next_after(T0), Some(T0 + 15_000));
    }

    #[test]
    fn r1_5_bad_expressions_say_why() {
        for (expr, why) in [
            ("", "0 fields"),
            ("* * * *", "4 fields"),
            ("0 0 8 * * * 2027", "7 fields"),
            ("61 * * * *", "not a cron expression"),
            ("0 8 * * mondays", "not a cron expression"),
            ("0 0 30 2 *", "never falls due"),
        ] {
            match CronSpec::parse(expr) {
                Ok(_) => panic!("{expr:?} was accepted"),
                Err(e) => assert!(e.contains(why), "{expr:?}: {e}"),
            }
        }
        let long = format!("0 8 * * {}", "1,".repeat(200));
        assert!(CronSpec::parse(&long).is_err());
        let e = checked_cron("nonsense").expect_err("refused");
        assert_eq!(e.code(), "invalid_cron");
    }

    #[test]
    fn r1_5_a_schedule_waits_until_its_first_due_time_after_creation() {
        let every_2s = spec("*/2 * * * * *");
        let created = T0 + 500;
        let run = MissedPolicy::RunOnce;
        assert_eq!(
            step(&every_2s, run, created, None, T0, T0 + 1_000),
            Step::Wait {
                next_due: Some(T0 + 2_000)
            }
        );
        assert_eq!(
            step(&every_2s, run, created, None, T0, T0 + 2_000),
            Step::Fire { due: T0 + 2_000 }
        );
        // Handled: wait for the next one.
        assert_eq!(
            step(&every_2s, run, created, Some(T0 + 2_000), T0, T0 + 2_010),
            Step::Wait {
                next_due: Some(T0 + 4_000)
            }
        );
    }

    #[test]
    fn r1_5_missed_due_times_run_once_for_the_latest_or_not_at_all() {
        let every_2s = spec("*/2 * * * * *");
        // Handled up to T0; the process was down from T0 + 1 s and started at T0 + 7.5 s:
        // T0+2, T0+4 and T0+6 were missed.
        let started = T0 + 7_500;
        assert_eq!(
            step(
                &every_2s,
                MissedPolicy::RunOnce,
                T0 - 60_000,
                Some(T0),
                started,
                started
            ),
            Step::Fire { due: T0 + 6_000 },
            "run_once: one run, for the latest missed due time"
        );
        assert_eq!(
            step(
                &every_2s,
                MissedPolicy::Skip,
                T0 - 60_000,
                Some(T0),
                started,
                started
            ),
            Step::Skip { due: T0 + 6_000 },
            "skip: passed over"
        );
        // Once the latest is recorded, the schedule waits for its next due time: one step per
        // missed window, never one per missed due time.
        for missed in [MissedPolicy::RunOnce, MissedPolicy::Skip] {
            assert_eq!(
                step(
                    &every_2s,
                    missed,
                    T0 - 60_000,
                    Some(T0 + 6_000),
                    started,
                    started
                ),
                Step::Wait {
                    next_due: Some(T0 + 8_000)
                }
            );
            // A due time after the start is on time, whatever `missed` says, even late.
            assert_eq!(
                step(
                    &every_2s,
                    missed,
                    T0 - 60_000,
                    Some(T0 + 6_000),
                    started,
                    T0 + 8_900
                ),
                Step::Fire { due: T0 + 8_000 }
            );
        }
    }

    #[test]
    fn r1_5_several_due_times_passed_while_running_fire_once_for_the_latest() {
        // Admission was refused for a while (no provider, store down): when it works again,
        // one run for the latest due time, none for the ones in between.
        let every_2s = spec("*/2 * * * * *");
        assert_eq!(
            step(
                &every_2s,
                MissedPolicy::Skip,
                T0 - 60_000,
                Some(T0),
                T0 - 1,
                T0 + 9_000
            ),
            Step::Fire { due: T0 + 8_000 }
        );
    }

    #[test]
    fn r1_5_request_ids_name_the_schedule_and_the_due_time() {
        let id = ScheduleId::new();
        let rid = request_id(id, T0);
        assert_eq!(rid, format!("schedule:{id}:{T0}"));
        assert!(limits::request_id(&rid).is_ok(), "{rid}");
    }

    fn entry(cron: &str) -> ScheduleConfig {
        ScheduleConfig {
            session_id: "0190b5c2-7d4e-7cc0-8a1e-3f1f2b3c4d5e".into(),
            cron: cron.into(),
            text: "good morning".into(),
            missed: MissedPolicy::RunOnce,
        }
    }

    #[test]
    fn r1_5_config_entries_are_checked_by_key() {
        let ok = check_config(&[entry("0 8 * * *")]).expect("valid");
        assert_eq!(ok.len(), 1);
        let (key, reason) = check_config(&[entry("0 8 * * *"), entry("0 8 * *")]).expect_err("bad");
        assert_eq!(key, "schedules[1].cron");
        assert!(reason.contains("4 fields"), "{reason}");
        let mut bad_session = entry("0 8 * * *");
        bad_session.session_id = "x".into();
        let (key, _) = check_config(&[bad_session]).expect_err("bad");
        assert_eq!(key, "schedules[0].session_id");
        let mut empty = entry("0 8 * * *");
        empty.text = " \u{7} ".into();
        let (key, reason) = check_config(&[empty]).expect_err("bad");
        assert_eq!(key, "schedules[0].text");
        assert!(reason.contains("empty"), "{reason}");
        let (key, reason) =
            check_config(&[entry("0 8 * * *"), entry(" 0 8 * * * ")]).expect_err("duplicate");
        assert_eq!(key, "schedules[1]");
        assert!(reason.contains("schedules[0]"), "{reason}");
    }

    #[test]
    fn r1_5_config_ids_are_stable_and_follow_the_content() {
        let a = check_config(&[entry("0 8 * * *")]).expect("valid")[0].id;
        let again = check_config(&[entry("0 8 * * *")]).expect("valid")[0].id;
        assert_eq!(a, again, "the same table gives the same id");
        let other_cron = check_config(&[entry("0 9 * * *")]).expect("valid")[0].id;
        let mut skip = entry("0 8 * * *");
        skip.missed = MissedPolicy::Skip;
        let other_missed = check_config(&[skip]).expect("valid")[0].id;
        let mut text = entry("0 8 * * *");
        text.text = "good evening".into();
        let other_text = check_config(&[text]).expect("valid")[0].id;
        assert_ne!(a, other_cron);
        assert_ne!(a, other_missed);
        assert_ne!(a, other_text);
    }
}

//! Schemas of the lower crates' types that answers carry (a receipt, an event, the status
//! enums), kept here so that storage and actors stay free of the HTTP document's concerns.
//!
//! They cannot drift silently: the enums' values are read from the real types (an exhaustive
//! `match` fails to compile when a variant is added), and the tests below serialize real
//! values and compare their fields with these schemas' properties.
use serde_json::json;
use std::borrow::Cow;
use turnkey_actors::config::BusyPolicy;
use turnkey_storage::{
    AdmissionStatus, ApprovalDecision, ApprovalStatus, EventKind, OutboxStatus, ToolRunDecision,
    ToolRunStatus,
};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// A string schema whose values are `values`.
fn string_enum<'a>(values: impl IntoIterator<Item = &'a str>, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values.into_iter().map(|v| json!(v))))
        .description(Some(description))
        .into()
}

/// A named string-enum schema for a status enum of the storage crate, its values from the
/// enum's own `as_str`.
macro_rules! status_schema {
    ($(#[doc = $doc:literal])* $schema:ident as $name:literal: $ty:ident { $($v:ident),+ $(,)? }) => {
        $(#[doc = $doc])*
        pub struct $schema;

        impl $schema {
            /// Every variant; the `match` below makes adding one a compile error here.
            pub const VALUES: &'static [$ty] = &[$($ty::$v),+];

            #[allow(dead_code)]
            fn exhaustive(v: $ty) {
                match v {
                    $($ty::$v)|+ => {}
                }
            }
        }

        impl PartialSchema for $schema {
            fn schema() -> RefOr<Schema> {
                string_enum(Self::VALUES.iter().map(|v| v.as_str()), concat!($($doc),*).trim())
            }
        }

        impl ToSchema for $schema {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed($name)
            }
        }
    };
}

status_schema! {
    /// `queued` → `started` → `terminal`, or `started` → `unknown` when the process running
    /// its turn died.
    AdmissionStatusName as "AdmissionStatus": AdmissionStatus { Queued, Started, Unknown, Terminal }
}

status_schema! {
    /// Where a platform message is: `pending` → `sending` → `sent`; `failed` when the platform
    /// refused it; `unknown` when a crash cut its send (it may be in the chat; not sent again).
    OutboxStatusName as "OutboxStatus": OutboxStatus { Pending, Sending, Sent, Failed, Unknown }
}

status_schema! {
    /// A person's answer to an approval request.
    ApprovalDecisionName as "ApprovalDecision": ApprovalDecision { Approve, Deny }
}

status_schema! {
    /// Where an approval is; `timed_out` is a denial nobody gave in time.
    ApprovalStatusName as "ApprovalStatus": ApprovalStatus { Pending, Approved, Denied, TimedOut }
}

status_schema! {
    /// A person's answer to a tool run a crash left `unknown`.
    ToolRunDecisionName as "ToolRunDecision": ToolRunDecision { Retry, Skip }
}

status_schema! {
    /// Where a tool run is.
    ToolRunStatusName as "ToolRunStatus": ToolRunStatus { Planned, Started, Finished, Unknown }
}

/// Every kind of event a session's log holds (API.md "Events").
pub struct EventKindName;

impl PartialSchema for EventKindName {
    fn schema() -> RefOr<Schema> {
        string_enum(
            EventKind::ALL.iter().map(|k| k.as_str()),
            "Every kind of event a session's log holds (API.md \"Events\").",
        )
    }
}

impl ToSchema for EventKindName {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("EventKind")
    }
}

/// What a new input does while a turn of its session runs.
pub struct BusyPolicyName;

impl PartialSchema for BusyPolicyName {
    fn schema() -> RefOr<Schema> {
        string_enum(
            BusyPolicy::NAMES.split(", "),
            "What a new input does while a turn runs: `queue` waits, `interrupt` stops the \
             running turn, `steer` joins it at its next model boundary.",
        )
    }
}

impl ToSchema for BusyPolicyName {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("BusyPolicy")
    }
}

/// The answer to a submission or a retry: the input is durable.
#[derive(ToSchema)]
#[schema(as = Receipt)]
#[allow(dead_code)] // the schema of `turnkey_actors::Receipt`
pub struct ReceiptSchema {
    admission_id: uuid::Uuid,
    session_id: uuid::Uuid,
    /// The input's place in the session's queue.
    seq: i64,
    /// `queued` on a new admission.
    #[schema(value_type = AdmissionStatusName)]
    status: String,
    /// `true` when the request id was seen before with the same input: nothing was queued.
    duplicate: bool,
    /// The `unknown` admission a retry runs again (only on a retry's receipt).
    retry_of: Option<uuid::Uuid>,
}

/// One committed event of a session's log.
#[derive(ToSchema)]
#[schema(as = Event)]
#[allow(dead_code)] // the schema of `turnkey_storage::Event`
pub struct EventSchema {
    session_id: uuid::Uuid,
    /// Gap-free, increasing per session.
    seq: i64,
    #[schema(value_type = EventKindName)]
    kind: String,
    turn_id: Option<uuid::Uuid>,
    admission_id: Option<uuid::Uuid>,
    created_at: String,
    /// The kind's own fields (API.md "Events").
    #[schema(value_type = Object)]
    data: serde_json::Value,
}

/// Token use and cost over all of a session's turns.
#[derive(ToSchema)]
#[schema(as = UsageTotals)]
#[allow(dead_code)] // the schema of `turnkey_storage::UsageTotals`
pub struct UsageTotalsSchema {
    input_tokens: i64,
    output_tokens: i64,
    cache_read_tokens: i64,
    cost_usd: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;
    use std::collections::BTreeSet;
    use turnkey_storage::{AdmissionId, Event, Seq, SessionId, TurnId, UsageTotals};

    /// The property names of an object schema, and which of them are required.
    fn properties<T: PartialSchema>() -> (BTreeSet<String>, BTreeSet<String>) {
        let RefOr::T(Schema::Object(o)) = T::schema() else {
            panic!("not an object schema");
        };
        (
            o.properties.keys().cloned().collect(),
            o.required.iter().cloned().collect(),
        )
    }

    fn keys(v: &impl Serialize) -> BTreeSet<String> {
        serde_json::to_value(v)
            .ok()
            .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect()))
            .unwrap_or_default()
    }

    /// The fields a value with every optional field set has are the schema's properties; one
    /// with none set has at least the required ones.
    fn agrees<T: PartialSchema>(full: &impl Serialize, bare: &impl Serialize) {
        let (props, required) = properties::<T>();
        assert_eq!(keys(full), props);
        assert!(
            keys(bare).is_superset(&required),
            "{:?} ⊉ {required:?}",
            keys(bare)
        );
    }

    #[test]
    fn the_receipt_schema_has_the_receipts_fields() {
        let receipt = |retry_of| turnkey_actors::Receipt {
            admission_id: AdmissionId::new(),
            session_id: SessionId::new(),
            seq: 1,
            status: AdmissionStatus::Queued,
            duplicate: false,
            retry_of,
        };
        agrees::<ReceiptSchema>(&receipt(Some(AdmissionId::new())), &receipt(None));
    }

    #[test]
    fn the_event_schema_has_the_events_fields() {
        let event = |ids: bool| Event {
            session_id: SessionId::new(),
            seq: Seq(3),
            kind: EventKind::MessageDelta,
            turn_id: ids.then(TurnId::new),
            admission_id: ids.then(AdmissionId::new),
            created_at: "2026-01-01T00:00:00Z".into(),
            data: json!({"text": "hi"}),
        };
        agrees::<EventSchema>(&event(true), &event(false));
    }

    #[test]
    fn the_usage_schema_has_the_usage_fields() {
        agrees::<UsageTotalsSchema>(&UsageTotals::default(), &UsageTotals::default());
    }

    fn enum_values<T: PartialSchema>() -> Vec<String> {
        let RefOr::T(Schema::Object(o)) = T::schema() else {
            panic!("not an object schema");
        };
        o.enum_values
            .unwrap_or_default()
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect()
    }

    #[test]
    fn the_enum_schemas_list_what_the_types_serialize_to() {
        fn check<T: PartialSchema, E: Serialize>(values: &[E]) {
            let serialized: Vec<String> = values
                .iter()
                .filter_map(|v| serde_json::to_value(v).ok())
                .filter_map(|v| v.as_str().map(String::from))
                .collect();
            assert_eq!(enum_values::<T>(), serialized);
        }
        check::<AdmissionStatusName, _>(AdmissionStatusName::VALUES);
        check::<ApprovalDecisionName, _>(ApprovalDecisionName::VALUES);
        check::<ApprovalStatusName, _>(ApprovalStatusName::VALUES);
        check::<ToolRunDecisionName, _>(ToolRunDecisionName::VALUES);
        check::<ToolRunStatusName, _>(ToolRunStatusName::VALUES);
        check::<OutboxStatusName, _>(OutboxStatusName::VALUES);
        check::<EventKindName, _>(&EventKind::ALL);
        let policies = enum_values::<BusyPolicyName>();
        assert_eq!(policies, ["queue", "interrupt", "steer"]);
        for p in &policies {
            assert_eq!(
                BusyPolicy::parse(p).map(BusyPolicy::as_str),
                Some(p.as_str())
            );
        }
    }
}

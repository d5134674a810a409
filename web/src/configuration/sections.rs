//! How one settings file fills two owners: `[server]`, `[database]`, `[auth]`, `[telemetry]`
//! and `[openai]` are the web crate's; every other section is read straight into the actors'
//! `RuntimeConfig`, so each runtime section is declared once, there, and never copied. Both
//! read through the same `config` deserializer: an error still names its key, and a value the
//! environment gave as a string still reads as a number.
use super::{
    AuthSettings, DatabaseSettings, OpenAiSettings, ServerSettings, Settings, TelemetrySettings,
};
use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use turnkey_actors::RuntimeConfig;

/// The sections the web crate owns, in the order an unknown key's message lists them.
const OWN: &[&str] = &["server", "database", "auth", "telemetry", "openai"];

impl<'de> Deserialize<'de> for Settings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(SettingsVisitor)
    }
}

struct SettingsVisitor;

impl<'de> Visitor<'de> for SettingsVisitor {
    type Value = Settings;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table of settings")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Settings, A::Error> {
        let mut split = Split {
            map,
            own: Own::default(),
            fields: &[],
        };
        let runtime = RuntimeConfig::deserialize(&mut split)?;
        let own = split.own;
        Ok(Settings {
            server: own.server.unwrap_or_default(),
            database: own.database.unwrap_or_default(),
            auth: own.auth.unwrap_or_default(),
            telemetry: own.telemetry.unwrap_or_default(),
            openai: own.openai.unwrap_or_default(),
            runtime,
        })
    }
}

/// The web crate's sections, as far as the map had them.
#[derive(Default)]
struct Own {
    server: Option<ServerSettings>,
    database: Option<DatabaseSettings>,
    auth: Option<AuthSettings>,
    telemetry: Option<TelemetrySettings>,
    openai: Option<OpenAiSettings>,
}

/// The settings' map as `RuntimeConfig` reads it: the web crate's sections are taken out on
/// the way (into `own`), and a key that neither knows is refused, listing every key both know.
struct Split<A> {
    map: A,
    own: Own,
    /// `RuntimeConfig`'s keys, as its `Deserialize` names them.
    fields: &'static [&'static str],
}

impl<'de, A: MapAccess<'de>> Split<A> {
    fn unknown(&self, key: &str) -> A::Error {
        let known: Vec<String> = OWN
            .iter()
            .chain(self.fields)
            .map(|k| format!("`{k}`"))
            .collect();
        de::Error::custom(format!(
            "unknown field `{key}`, expected one of {}",
            known.join(", ")
        ))
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Split<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        while let Some(key) = self.map.next_key::<String>()? {
            match key.as_str() {
                "server" => self.own.server = Some(self.map.next_value()?),
                "database" => self.own.database = Some(self.map.next_value()?),
                "auth" => self.own.auth = Some(self.map.next_value()?),
                "telemetry" => self.own.telemetry = Some(self.map.next_value()?),
                "openai" => self.own.openai = Some(self.map.next_value()?),
                k if self.fields.contains(&k) => {
                    return seed.deserialize(key.into_deserializer()).map(Some)
                }
                k => return Err(self.unknown(k)),
            }
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

impl<'de, A: MapAccess<'de>> Deserializer<'de> for &mut Split<A> {
    type Error = A::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
        visitor.visit_map(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.fields = fields;
        visitor.visit_map(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

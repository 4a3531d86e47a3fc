//! Typed request arguments: the one reader of JSON argument objects for every MCP tool action
//! and the session drive requests. An argument struct derives `Deserialize` and names the
//! reader of each field (`#[serde(default, deserialize_with = "args::string")]`); [`parse`]
//! turns a refusal into one line that starts with the field's name (`limit must be a
//! non-negative integer`). Null reads as absent. Unknown properties are not this module's
//! business: the MCP registry refuses them against the tool's schema before a handler runs.

use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde_json::{Map, Value};

/// A refused argument: the whole message, field name first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ArgError(pub String);

impl std::fmt::Display for ArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Reads an argument object into `T`.
pub(crate) fn parse<T: DeserializeOwned>(args: &Map<String, Value>) -> Result<T, ArgError> {
    from_value(Value::Object(args.clone()))
}

/// Reads a value into `T`; a field reader's refusal is prefixed with the field's name (the
/// innermost object key on the error's path).
pub(crate) fn from_value<T: DeserializeOwned>(v: Value) -> Result<T, ArgError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let field = e
            .path()
            .iter()
            .filter_map(|s| match s {
                serde_path_to_error::Segment::Map { key } => Some(key.clone()),
                _ => None,
            })
            .next_back();
        let inner = e.into_inner().to_string();
        // serde's refusal of a key already names it (`unknown field `x`, expected ...`).
        let names_itself = inner.starts_with("unknown field");
        ArgError(match field {
            Some(f) if !names_itself => format!("{f} {inner}"),
            _ => inner,
        })
    })
}

/// Reads `{action: args}` into an externally tagged enum `T` whose variants are the actions
/// (`#[serde(rename_all = "snake_case")]`, one argument struct per action). The action was
/// checked against the tool's list by the caller.
pub(crate) fn action<T: DeserializeOwned>(
    action: &str,
    args: &Map<String, Value>,
) -> Result<T, ArgError> {
    let mut m = Map::with_capacity(1);
    m.insert(action.to_owned(), Value::Object(args.clone()));
    from_value(Value::Object(m))
}

/// An optional string.
pub(crate) fn string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(D::Error::custom("must be a string")),
    }
}

/// An optional non-negative integer.
pub(crate) fn uint<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| D::Error::custom("must be a non-negative integer")),
    }
}

/// An optional boolean.
pub(crate) fn boolean<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(b)),
        Some(_) => Err(D::Error::custom("must be a boolean")),
    }
}

/// An optional terminal dimension: a non-negative integer that fits a `u16`.
pub(crate) fn dim<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
    uint(d)?
        .map(|v| u16::try_from(v).map_err(|_| D::Error::custom("is too large")))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum Call {
        Get {
            #[serde(default, deserialize_with = "string")]
            name: Option<String>,
            #[serde(default, deserialize_with = "uint")]
            limit: Option<u64>,
        },
        Resize {
            #[serde(default, deserialize_with = "dim")]
            rows: Option<u16>,
            #[serde(default, deserialize_with = "boolean")]
            force: Option<bool>,
        },
    }

    fn call(a: &str, v: Value) -> Result<Call, String> {
        action(a, v.as_object().unwrap()).map_err(|e| e.0)
    }

    #[test]
    fn fields_read_typed_and_refusals_name_the_field() {
        assert_eq!(
            call(
                "get",
                json!({"action": "get", "name": "x", "limit": null, "other": 1})
            ),
            Ok(Call::Get {
                name: Some("x".into()),
                limit: None
            })
        );
        assert_eq!(
            call("get", json!({"name": 5})),
            Err("name must be a string".into())
        );
        for bad in [json!(-1), json!(1.5), json!("3")] {
            assert_eq!(
                call("get", json!({"limit": bad})),
                Err("limit must be a non-negative integer".into())
            );
        }
        assert_eq!(
            call("resize", json!({"rows": 70000})),
            Err("rows is too large".into())
        );
        assert_eq!(
            call("resize", json!({"force": "yes"})),
            Err("force must be a boolean".into())
        );
        // Only the action's own fields are read: another action's bad field is not looked at.
        assert_eq!(
            call("resize", json!({"name": 5, "rows": 24})),
            Ok(Call::Resize {
                rows: Some(24),
                force: None
            })
        );
    }
}

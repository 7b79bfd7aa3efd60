//! JSON with the properties of every object schema in the order of its `required` list.
//!
//! `serde_json::Value` keeps object keys sorted, so a schema written as
//! `{"required": ["reason", "decisive"], "properties": {"reason": .., "decisive": ..}}` would go
//! out with `decisive` before `reason`, and the backends that generate keys in schema order
//! (llama.cpp's grammar converter, OpenAI structured outputs) would make the model give its
//! verdict before its reasons, against what the prompt asks. [`SchemaOrdered`] serializes a value
//! with each `properties` map in the order of its sibling `required` list (properties not listed
//! follow, sorted); every other map keeps its sorted order. Cache keys are computed from the
//! value itself and do not change.

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

/// Serializes the wrapped value with schema properties in `required` order (see the module docs).
pub struct SchemaOrdered<'a>(pub &'a Value);

impl Serialize for SchemaOrdered<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Node(self.0, None).serialize(s)
    }
}

/// A value and, for a `properties` map, the `required` list that orders its keys.
struct Node<'a>(&'a Value, Option<&'a [Value]>);

impl Serialize for Node<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                if let Some(order) = self.1 {
                    // Stable: keys not in `required` keep their sorted order, after the others.
                    keys.sort_by_key(|k| {
                        order
                            .iter()
                            .position(|r| r.as_str() == Some(k.as_str()))
                            .unwrap_or(usize::MAX)
                    });
                }
                let required = m.get("required").and_then(Value::as_array);
                let mut map = s.serialize_map(Some(keys.len()))?;
                for k in keys {
                    let order = match (k.as_str(), required) {
                        ("properties", Some(r)) => Some(r.as_slice()),
                        _ => None,
                    };
                    map.serialize_entry(k, &Node(&m[k], order))?;
                }
                map.end()
            }
            Value::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for x in a {
                    seq.serialize_element(&Node(x, None))?;
                }
                seq.end()
            }
            other => other.serialize(s),
        }
    }
}

/// `value` as compact JSON text with schema properties in `required` order.
pub fn to_string(value: &Value) -> String {
    // Serializing a `Value` (string keys only) cannot fail.
    serde_json::to_string(&SchemaOrdered(value)).unwrap_or_else(|_| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn properties_follow_required_and_other_maps_stay_sorted() {
        let v = json!({"body": {"schema": {
            "type": "object",
            "required": ["reason", "decisive", "confidence"],
            "properties": {
                "reason": {"type": "string"},
                "decisive": {"type": "boolean"},
                "extra": {"type": "string"},
                "confidence": {"type": "object", "required": ["z", "a"],
                               "properties": {"a": {"type": "number"}, "z": {"type": "number"}}}
            }}}, "a": 1});
        let text = to_string(&v);
        let at = |needle: &str| text.find(needle).unwrap();
        assert!(at("\"reason\":{") < at("\"decisive\":{"));
        assert!(at("\"decisive\":{") < at("\"confidence\":{"));
        assert!(at("\"confidence\":{") < at("\"extra\":{"), "unlisted last");
        assert!(
            at("\"z\":{") < at("\"a\":{\"type\":\"number\"}"),
            "nested schemas too"
        );
        // Not a properties map: sorted as before ("a" before "body"; "properties" < "required" < "type").
        assert!(text.starts_with("{\"a\":1,\"body\":"));
        assert!(
            at("\"properties\"") < at("\"required\"")
                && at("\"required\"") < at("\"type\":\"object\"")
        );
        // Same value back.
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v);
    }
}

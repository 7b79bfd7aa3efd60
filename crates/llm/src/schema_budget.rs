//! Fitting a JSON schema's strings to an answer's token budget, for grammar-constrained decoding.
//!
//! Under a grammar the model cannot stop early: when a small model loops inside a string
//! (`"reason": "1.1.1.1...`), it writes until `max_tokens` runs out and the JSON is cut, and the
//! repair call that follows, being greedy, loops the same way. [`fit`] gives every free string
//! of the schema a `maxLength` such that the whole answer fits the budget when each character
//! is one token, the worst case for the text a JSON grammar lets through (escapes and
//! multi-byte characters can take more; a looping model writes plain ASCII). Strings that already
//! have a smaller `maxLength` keep it; the rest share what is left equally ("water-filling").
//!
//! The fitted schema only narrows the original (every answer it admits, the original admits), so
//! the answer still validates against the schema the caller asked for. Only the embedded backend
//! uses it, for the grammar; remote providers get the caller's schema unchanged.
//!
//! [`for_grammar`] also makes a bounded number something the grammar can hold: llama.cpp's
//! converter ignores `minimum`/`maximum` on numbers (only integer ranges become rules), so a model
//! can answer `"confidence": 1.1` to a schema that says at most 1, fail validation and pay a repair
//! call that, greedy, answers the same. A number with both bounds becomes an `enum` of 101 values
//! evenly spaced from `minimum` to `maximum` (a confidence in steps of 0.01), again a narrowing.

use serde_json::Value;

/// Worst-case characters of an integer under llama.cpp's grammar converter (sign, 16 digits).
const INTEGER_CHARS: usize = 17;
/// Worst-case characters of a number: sign, 16 + 16 + 16 digits, point, exponent and its sign.
const NUMBER_CHARS: usize = 52;
/// Per object member: two quotes, colon, comma and up to three separators of whitespace.
const MEMBER_CHARS: usize = 7;
/// Smallest string length worth fitting to; below it the schema is left as it is.
const MIN_FITTED_CHARS: usize = 8;

/// A string whose length the fitting decides: where it is, its own cap, how often it can occur.
struct Slot {
    pointer: String,
    cap: Option<usize>,
    times: usize,
}

/// Points of the grid a bounded number becomes (see the module docs).
const NUMBER_GRID: u32 = 100;

/// The schema the embedded backend turns into a grammar: bounded numbers as a grid, then free
/// strings fitted to `max_tokens` ([`fit`]). `None` when nothing changes.
pub fn for_grammar(schema: &Value, max_tokens: u32) -> Option<Value> {
    let mut narrowed = schema.clone();
    let gridded = grid_numbers(&mut narrowed);
    match fit(&narrowed, max_tokens) {
        Some(fitted) => Some(fitted),
        None => gridded.then_some(narrowed),
    }
}

/// Replaces every number schema with finite `minimum` and `maximum` (and nothing else that
/// constrains it) by an enum of grid values; true when any was replaced.
fn grid_numbers(node: &mut Value) -> bool {
    let mut changed = false;
    if let Some(obj) = node.as_object_mut() {
        let bounds = (
            obj.get("minimum").and_then(Value::as_f64),
            obj.get("maximum").and_then(Value::as_f64),
        );
        let plain = [
            "enum",
            "const",
            "multipleOf",
            "exclusiveMinimum",
            "exclusiveMaximum",
        ]
        .iter()
        .all(|k| !obj.contains_key(*k));
        if let (Some("number"), (Some(lo), Some(hi)), true) =
            (obj.get("type").and_then(Value::as_str), bounds, plain)
        {
            if lo.is_finite() && hi.is_finite() && lo < hi {
                let values: Vec<Value> = (0..=NUMBER_GRID)
                    .map(|k| {
                        let v = lo + (hi - lo) * f64::from(k) / f64::from(NUMBER_GRID);
                        // Shortest decimal text: 0.07, not 0.07000000000000001.
                        let v = ((v * 1e9).round() / 1e9).clamp(lo, hi);
                        Value::from(v)
                    })
                    .collect();
                obj.insert("enum".to_string(), Value::Array(values));
                return true;
            }
        }
        for child in obj.values_mut() {
            changed |= grid_numbers(child);
        }
    } else if let Some(items) = node.as_array_mut() {
        for child in items {
            changed |= grid_numbers(child);
        }
    }
    changed
}

/// The schema with `maxLength` on its free strings so that an answer fits `max_tokens`, or
/// `None` when the schema cannot be bounded (unbounded arrays, `anyOf`, `$ref`, patterns without
/// a length, ...), the budget is too small even for short strings, or nothing needs changing.
pub fn fit(schema: &Value, max_tokens: u32) -> Option<Value> {
    let mut slots = Vec::new();
    let fixed = cost(schema, "", 1, &mut slots)?;
    if slots.is_empty() {
        return None;
    }
    let mut left = (max_tokens as usize).checked_sub(fixed)?;
    // Smallest caps first: a string capped below its fair share gives the rest to the others.
    slots.sort_by_key(|s| s.cap.unwrap_or(usize::MAX));
    let mut weight: usize = slots.iter().map(|s| s.times).sum();
    let mut fitted = schema.clone();
    let mut changed = false;
    for slot in &slots {
        let share = left / weight.max(1);
        let give = slot.cap.map_or(share, |c| c.min(share));
        if give < MIN_FITTED_CHARS.min(slot.cap.unwrap_or(usize::MAX)) {
            return None;
        }
        if slot.cap != Some(give) {
            let node = fitted.pointer_mut(&slot.pointer)?;
            if node.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize > give {
                return None;
            }
            node["maxLength"] = Value::from(give);
            changed = true;
        }
        left -= give * slot.times;
        weight -= slot.times;
    }
    changed.then_some(fitted)
}

/// Worst-case characters of what `node` admits, not counting the free strings, which go to
/// `slots` (each occurring `times` times). `None` when it is unbounded or not understood.
fn cost(node: &Value, pointer: &str, times: usize, slots: &mut Vec<Slot>) -> Option<usize> {
    let obj = node.as_object()?;
    for unsupported in [
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "not",
        "patternProperties",
    ] {
        if obj.contains_key(unsupported) {
            return None;
        }
    }
    if let Some(values) = obj.get("enum").and_then(Value::as_array) {
        return values.iter().map(|v| v.to_string().chars().count()).max();
    }
    if let Some(v) = obj.get("const") {
        return Some(v.to_string().chars().count());
    }
    let max_length = obj
        .get("maxLength")
        .and_then(Value::as_u64)
        .map(|n| n as usize);
    let kind = match obj.get("type") {
        Some(Value::String(t)) => t.as_str(),
        None if obj.contains_key("properties") => "object",
        _ => return None,
    };
    match kind {
        "string" if obj.contains_key("pattern") || obj.contains_key("format") => {
            max_length.map(|n| n + 2)
        }
        "string" => {
            slots.push(Slot {
                pointer: pointer.to_string(),
                cap: max_length,
                times,
            });
            Some(2 * times)
        }
        "integer" => {
            let digits = |k: &str| {
                obj.get(k)
                    .and_then(Value::as_i64)
                    .map(|n| n.to_string().len())
            };
            Some(match (digits("minimum"), digits("maximum")) {
                (Some(a), Some(b)) => a.max(b) * times,
                _ => INTEGER_CHARS * times,
            })
        }
        "number" => Some(NUMBER_CHARS * times),
        "boolean" => Some(5 * times),
        "null" => Some(4 * times),
        "object" => {
            match obj.get("additionalProperties") {
                None | Some(Value::Bool(false)) => {}
                Some(_) => return None,
            }
            let mut total = 2 * times;
            if let Some(props) = obj.get("properties").and_then(Value::as_object) {
                for (key, child) in props {
                    let child_pointer = format!("{pointer}/properties/{}", escape(key));
                    total += (key.chars().count() + MEMBER_CHARS) * times;
                    total += cost(child, &child_pointer, times, slots)?;
                }
            }
            Some(total)
        }
        "array" => {
            let n = obj.get("maxItems").and_then(Value::as_u64)? as usize;
            let items = obj.get("items")?;
            let each = cost(items, &format!("{pointer}/items"), times * n, slots)?;
            Some(2 * times + each + 3 * n * times)
        }
        _ => None,
    }
}

/// A key as a JSON pointer segment.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn location(reason_cap: usize) -> Value {
        json!({"type": "object", "required": ["reason", "agent", "step", "confidence"], "properties": {
            "reason": {"type": "string", "maxLength": reason_cap},
            "agent": {"type": "string", "maxLength": 64},
            "step": {"type": "integer", "minimum": 0},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1}}})
    }

    /// Worst-case characters of an answer the fitted schema admits, written out by hand.
    fn worst_case(reason: usize, agent: usize) -> usize {
        let members: usize = ["reason", "agent", "step", "confidence"]
            .iter()
            .map(|k| k.len() + MEMBER_CHARS)
            .sum();
        2 + members + (2 + reason) + (2 + agent) + INTEGER_CHARS + NUMBER_CHARS
    }

    #[test]
    fn the_free_string_takes_what_the_others_leave() {
        let fitted = fit(&location(600), 384).unwrap();
        let reason = fitted["properties"]["reason"]["maxLength"]
            .as_u64()
            .unwrap() as usize;
        // The agent keeps its own smaller cap; the reason gets the rest, and the worst case fits.
        assert_eq!(fitted["properties"]["agent"]["maxLength"], 64);
        assert!(worst_case(reason, 64) <= 384, "{reason}");
        assert!(worst_case(reason + 1, 64) > 384 - 1, "{reason}");
        assert!(reason > 150, "{reason}");
        // Everything else is untouched.
        assert_eq!(fitted["required"], location(600)["required"]);
        assert_eq!(
            fitted["properties"]["confidence"],
            location(600)["properties"]["confidence"]
        );
    }

    #[test]
    fn caps_that_already_fit_are_left_alone() {
        assert_eq!(fit(&location(20), 4096), None);
        // A bigger budget never lowers a cap below what a smaller one gives.
        let small = fit(&location(600), 300).unwrap()["properties"]["reason"]["maxLength"].clone();
        let big = fit(&location(600), 600).unwrap()["properties"]["reason"]["maxLength"].clone();
        assert!(small.as_u64() < big.as_u64(), "{small} {big}");
    }

    #[test]
    fn uncapped_strings_share_equally() {
        let s = json!({"type": "object", "properties": {
            "a": {"type": "string"}, "b": {"type": "string"}}});
        let f = fit(&s, 200).unwrap();
        assert_eq!(
            f["properties"]["a"]["maxLength"],
            f["properties"]["b"]["maxLength"]
        );
        let a = f["properties"]["a"]["maxLength"].as_u64().unwrap() as usize;
        assert!(2 + 2 * (1 + MEMBER_CHARS) + 2 * (2 + a) <= 200);
    }

    #[test]
    fn bounded_arrays_count_every_item() {
        let s = json!({"type": "object", "properties": {
            "notes": {"type": "array", "maxItems": 4, "items": {"type": "string"}}}});
        let f = fit(&s, 300).unwrap();
        let each = f["properties"]["notes"]["items"]["maxLength"]
            .as_u64()
            .unwrap() as usize;
        assert!(each * 4 < 300 && each * 5 > 200, "{each}");
    }

    #[test]
    fn what_cannot_be_bounded_is_left_as_it_is() {
        let unbounded_array = json!({"type": "object", "properties": {
            "notes": {"type": "array", "items": {"type": "string"}}}});
        assert_eq!(fit(&unbounded_array, 300), None);
        let any_of = json!({"anyOf": [{"type": "string"}, {"type": "integer"}]});
        assert_eq!(fit(&any_of, 300), None);
        let open = json!({"type": "object", "additionalProperties": true,
            "properties": {"a": {"type": "string"}}});
        assert_eq!(fit(&open, 300), None);
        // Too small a budget: better a cut answer the caller sees than a 1-character reason.
        assert_eq!(fit(&location(600), 120), None);
        // A minimum length the budget cannot give.
        let min = json!({"type": "object", "properties": {
            "a": {"type": "string", "minLength": 150}}});
        assert_eq!(fit(&min, 100), None);
        // Nothing to fit.
        assert_eq!(fit(&json!({"type": "integer"}), 10), None);
    }

    #[test]
    fn bounded_numbers_become_a_grid_inside_the_bounds() {
        let s = location(600);
        let g = for_grammar(&s, 384).unwrap();
        let grid = g["properties"]["confidence"]["enum"].as_array().unwrap();
        assert_eq!(grid.len(), 101);
        assert_eq!(grid[0], json!(0.0));
        assert_eq!(grid[7], json!(0.07));
        assert_eq!(grid[100], json!(1.0));
        // Every grid value validates against the schema the caller gave.
        let v = jsonschema::validator_for(&s["properties"]["confidence"]).unwrap();
        assert!(grid.iter().all(|x| v.is_valid(x)));
        // A short enum costs less than a free number: the reason gets those characters.
        let fitted = fit(&s, 384).unwrap()["properties"]["reason"]["maxLength"].clone();
        assert!(g["properties"]["reason"]["maxLength"].as_u64() > fitted.as_u64());
        // Half-open, unbounded or already constrained numbers stay as they are.
        for n in [
            json!({"type": "number", "minimum": 0}),
            json!({"type": "number", "minimum": 0, "exclusiveMaximum": 1}),
            json!({"type": "number", "minimum": 1, "maximum": 1}),
            json!({"type": "integer", "minimum": 0, "maximum": 1}),
        ] {
            assert_eq!(for_grammar(&n, 100), None, "{n}");
        }
        let odd = for_grammar(
            &json!({"type": "number", "minimum": -2.5, "maximum": 7}),
            50,
        )
        .unwrap();
        let odd = odd["enum"].as_array().unwrap();
        assert_eq!(
            (odd[0].clone(), odd[100].clone()),
            (json!(-2.5), json!(7.0))
        );
        assert_eq!(odd[1], json!(-2.405));
    }

    #[test]
    fn keys_with_pointer_characters_are_found() {
        let s = json!({"type": "object", "properties": {"a/b~c": {"type": "string"}}});
        let f = fit(&s, 100).unwrap();
        assert!(f["properties"]["a/b~c"]["maxLength"].is_u64(), "{f}");
    }
}

//! Function calling for `serve-model` (OpenAI's `tools` / `tool_choice`), over any model.
//!
//! The protocol, as agent frameworks speak it (the OpenAI Agents SDK's handoffs are tools;
//! AutoGen and LangGraph call tools the same way):
//! - a request lists `tools` (`{"type":"function","function":{name, description, parameters}}`)
//!   and a `tool_choice`: `none`, `auto` (default), `required`, or one function by name;
//! - the history holds assistant messages with `tool_calls` and `tool` messages answering them.
//!
//! Models that have no tool-calling chat template (the embedded SmolLM2 among them) see the
//! tools as text: the system message lists them with their parameter schemas and says how to
//! call one, an earlier call is shown as the JSON the model would write, and a tool's answer is a
//! user message naming the function. Generation:
//! - `required` or a named function: the answer is constrained to `{"name", "arguments"}` by a
//!   JSON schema (one `anyOf` branch per allowed function, each with its own parameter schema),
//!   so a tool call always comes back and always parses;
//! - `auto`: the model writes freely; an answer that is exactly such a JSON object naming a
//!   listed function is a tool call, anything else a text answer (a weak model will mostly answer
//!   in text: set `tool_choice` when a call must happen);
//! - `none`: tools are described but no call is taken from the answer.

use maslens_llm::openai_wire::RequestMessage;
use maslens_llm::{Message, Role};
use serde_json::{json, Value};

/// One function a request offers.
#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    pub name: String,
    pub description: String,
    /// JSON schema of the arguments (`{"type":"object"}` when absent).
    pub parameters: Value,
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    Named(String),
}

/// The tools of a request and how one may be chosen.
#[derive(Debug, Clone, PartialEq)]
pub struct Tools {
    pub functions: Vec<Function>,
    pub choice: ToolChoice,
}

/// Read a request's `tools` and `tool_choice` (absent `tools`: `None`); errors name the field.
pub fn parse_tools(
    tools: Option<&Value>,
    tool_choice: Option<&Value>,
) -> Result<Option<Tools>, String> {
    let list = match tools {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(_) => return Err("`tools` must be an array".into()),
    };
    let mut functions = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let kind = t.get("type").and_then(Value::as_str).unwrap_or("function");
        if kind != "function" {
            return Err(format!(
                "tools[{i}].type {kind:?} is not supported (function)"
            ));
        }
        let f = t
            .get("function")
            .and_then(Value::as_object)
            .ok_or(format!("tools[{i}].function is missing"))?;
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or(format!("tools[{i}].function.name is missing"))?;
        if functions.iter().any(|g: &Function| g.name == name) {
            return Err(format!("tools[{i}].function.name {name:?} is listed twice"));
        }
        let parameters = match f.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object"}),
            Some(p) if p.is_object() => p.clone(),
            Some(_) => {
                return Err(format!(
                    "tools[{i}].function.parameters must be a JSON schema object"
                ))
            }
        };
        functions.push(Function {
            name: name.to_string(),
            description: f
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            parameters,
        });
    }
    let choice = match tool_choice {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(format!(
                    "`tool_choice` {other:?} is not supported (none, auto, required, or {{\"type\":\"function\",\"function\":{{\"name\":...}}}})"
                ))
            }
        },
        Some(v) => {
            let name = v
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or("`tool_choice.function.name` is missing")?;
            if !functions.iter().any(|f| f.name == name) {
                return Err(format!(
                    "`tool_choice` names {name:?}, which is not in `tools`"
                ));
            }
            ToolChoice::Named(name.to_string())
        }
    };
    if functions.is_empty() && matches!(choice, ToolChoice::Required | ToolChoice::Named(_)) {
        return Err("`tool_choice` requires a call but `tools` is empty".into());
    }
    Ok(Some(Tools { functions, choice }))
}

impl Tools {
    /// The functions a call may name under the choice.
    fn allowed(&self) -> Vec<&Function> {
        match &self.choice {
            ToolChoice::Named(n) => self.functions.iter().filter(|f| &f.name == n).collect(),
            ToolChoice::None => Vec::new(),
            _ => self.functions.iter().collect(),
        }
    }

    /// Whether the answer must be a call (and is constrained to one).
    pub fn forces_call(&self) -> bool {
        matches!(self.choice, ToolChoice::Required | ToolChoice::Named(_))
    }

    /// The text added to the system message: the functions and how to call one.
    pub fn instructions(&self) -> String {
        let mut s = String::from("You can call these functions:\n");
        for f in &self.functions {
            s.push_str(&format!(
                "- {}: {} Parameters (JSON schema): {}\n",
                f.name,
                if f.description.is_empty() {
                    "(no description)"
                } else {
                    &f.description
                },
                f.parameters
            ));
        }
        match &self.choice {
            ToolChoice::None => s.push_str("Do not call a function now; answer in text."),
            ToolChoice::Named(n) => s.push_str(&format!(
                "Call {n} now: answer with only {{\"name\": \"{n}\", \"arguments\": {{...}}}}."
            )),
            ToolChoice::Required => s.push_str(
                "Call one of them now: answer with only {\"name\": NAME, \"arguments\": {...}}.",
            ),
            ToolChoice::Auto => s.push_str(
                "To call one, answer with only {\"name\": NAME, \"arguments\": {...}}; otherwise answer in text.",
            ),
        }
        s
    }

    /// The JSON schema a forced call is generated under.
    pub fn call_schema(&self) -> Option<Value> {
        if !self.forces_call() {
            return None;
        }
        let branches: Vec<Value> = self
            .allowed()
            .into_iter()
            .map(|f| {
                json!({
                    "type": "object",
                    "properties": {"name": {"const": f.name}, "arguments": f.parameters},
                    "required": ["name", "arguments"],
                    "additionalProperties": false,
                })
            })
            .collect();
        match branches.len() {
            0 => None,
            1 => branches.into_iter().next(),
            _ => Some(json!({"anyOf": branches})),
        }
    }

    /// The tool calls an answer makes, in OpenAI's shape (`id` made from `call_prefix` and the
    /// position): a JSON object `{"name", "arguments"}` naming an allowed function.
    pub fn calls_in(&self, answer: &str, call_prefix: &str) -> Option<Vec<Value>> {
        let allowed = self.allowed();
        if allowed.is_empty() {
            return None;
        }
        let v: Value = serde_json::from_str(answer.trim()).ok()?;
        let one = |c: &Value| -> Option<(String, Value)> {
            let name = c.get("name")?.as_str()?;
            allowed.iter().find(|f| f.name == name)?;
            let args = c.get("arguments").cloned().unwrap_or_else(|| json!({}));
            Some((name.to_string(), args))
        };
        let calls: Vec<(String, Value)> = match &v {
            Value::Array(a) => a.iter().map(one).collect::<Option<_>>()?,
            Value::Object(_) => vec![one(&v)?],
            _ => return None,
        };
        Some(
            calls
                .into_iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    let arguments = match args {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    json!({
                        "id": format!("{call_prefix}-{i}"),
                        "type": "function",
                        "function": {"name": name, "arguments": arguments},
                    })
                })
                .collect(),
        )
    }
}

/// An assistant message's `tool_calls` as the text a model writes for them.
pub fn calls_as_text(calls: &Value, i: usize) -> Result<String, String> {
    let arr = calls
        .as_array()
        .ok_or(format!("messages[{i}].tool_calls must be an array"))?;
    let mut out = Vec::with_capacity(arr.len());
    for (j, c) in arr.iter().enumerate() {
        let f = c
            .get("function")
            .ok_or(format!("messages[{i}].tool_calls[{j}].function is missing"))?;
        let name = f.get("name").and_then(Value::as_str).ok_or(format!(
            "messages[{i}].tool_calls[{j}].function.name is missing"
        ))?;
        let args = match f.get("arguments") {
            Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
            Some(v) => v.clone(),
            None => json!({}),
        };
        // Written as the instructions ask the model to write a call: name first.
        out.push(format!(
            "{{\"name\": {}, \"arguments\": {args}}}",
            json!(name)
        ));
    }
    Ok(if out.len() == 1 {
        out.swap_remove(0)
    } else {
        format!("[{}]", out.join(", "))
    })
}

/// A `tool` message as the user message a model without a tool template reads.
pub fn tool_result_message(m: &RequestMessage, content: String) -> Message {
    let (name, id) = (m.name.as_deref(), m.tool_call_id.as_deref());
    let head = match (name, id) {
        (Some(n), Some(id)) => format!("Result of {n} (call {id}):"),
        (Some(n), None) => format!("Result of {n}:"),
        (None, Some(id)) => format!("Result of call {id}:"),
        (None, None) => "Function result:".to_string(),
    };
    Message {
        role: Role::User,
        content: format!("{head}\n{content}"),
    }
}

/// Add the tools' instructions to the first system message (or a new one in front).
pub fn add_instructions(messages: &mut Vec<Message>, tools: &Tools) {
    let text = tools.instructions();
    match messages.iter_mut().find(|m| m.role == Role::System) {
        Some(m) => {
            m.content.push_str("\n\n");
            m.content.push_str(&text);
        }
        None => messages.insert(
            0,
            Message {
                role: Role::System,
                content: text,
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(choice: Value) -> Tools {
        let body = json!({
            "tools": [
                {"type": "function", "function": {"name": "transfer_to_math", "description": "Hand off to math.",
                 "parameters": {"type": "object", "properties": {}, "additionalProperties": false}}},
                {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
                 "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
            ],
            "tool_choice": choice,
        });
        parse_tools(body.get("tools"), body.get("tool_choice"))
            .unwrap()
            .unwrap()
    }

    #[test]
    fn choices_parse_and_bad_fields_are_named() {
        assert_eq!(tools(json!("auto")).choice, ToolChoice::Auto);
        assert_eq!(tools(Value::Null).choice, ToolChoice::Auto);
        assert_eq!(
            tools(json!({"type": "function", "function": {"name": "add"}})).choice,
            ToolChoice::Named("add".into())
        );
        for (body, field) in [
            (json!({"tools": 3}), "`tools`"),
            (json!({"tools": [{"type": "web"}]}), "tools[0].type"),
            (
                json!({"tools": [{"type": "function"}]}),
                "tools[0].function",
            ),
            (
                json!({"tools": [{"function": {"name": "a"}}, {"function": {"name": "a"}}]}),
                "twice",
            ),
            (
                json!({"tools": [{"function": {"name": "a"}}], "tool_choice": "any"}),
                "`tool_choice`",
            ),
            (
                json!({"tools": [{"function": {"name": "a"}}], "tool_choice": {"type": "function", "function": {"name": "b"}}}),
                "not in `tools`",
            ),
            (json!({"tools": [], "tool_choice": "required"}), "empty"),
        ] {
            let e = parse_tools(body.get("tools"), body.get("tool_choice")).unwrap_err();
            assert!(e.contains(field), "{e} should name {field}");
        }
    }

    #[test]
    fn a_forced_call_is_constrained_to_the_allowed_functions() {
        assert_eq!(tools(json!("auto")).call_schema(), None);
        let s = tools(json!("required")).call_schema().unwrap();
        assert_eq!(s["anyOf"].as_array().unwrap().len(), 2);
        let named = tools(json!({"type": "function", "function": {"name": "add"}}))
            .call_schema()
            .unwrap();
        assert_eq!(named["properties"]["name"]["const"], "add");
        assert_eq!(
            named["properties"]["arguments"]["required"],
            json!(["a", "b"])
        );
        // The schema is one the request checks accept (it reaches llama.cpp's converter).
        maslens_llm::schema_check::check_schema(&s).unwrap();
        maslens_llm::schema_check::check_schema(&named).unwrap();
    }

    #[test]
    fn answers_become_calls_only_when_they_name_an_allowed_function() {
        let t = tools(json!("auto"));
        let calls = t
            .calls_in(
                r#" {"name": "add", "arguments": {"a": 2, "b": 3}} "#,
                "call-7",
            )
            .unwrap();
        assert_eq!(calls[0]["id"], "call-7-0");
        assert_eq!(calls[0]["function"]["name"], "add");
        assert_eq!(calls[0]["function"]["arguments"], r#"{"a":2,"b":3}"#);
        assert!(t.calls_in("The sum is 5.", "c").is_none());
        assert!(t
            .calls_in(r#"{"name": "delete_everything", "arguments": {}}"#, "c")
            .is_none());
        let none = tools(json!("none"));
        assert!(none
            .calls_in(r#"{"name": "add", "arguments": {}}"#, "c")
            .is_none());
        let two = t
            .calls_in(
                r#"[{"name": "add", "arguments": {}}, {"name": "transfer_to_math"}]"#,
                "c",
            )
            .unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(two[1]["function"]["arguments"], "{}");
    }

    #[test]
    fn history_is_rendered_for_models_without_a_tool_template() {
        let text = calls_as_text(
            &json!([{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}}]),
            2,
        )
        .unwrap();
        assert_eq!(text, r#"{"name": "add", "arguments": {"a":1}}"#);
        let tool = RequestMessage {
            role: "tool".into(),
            name: Some("add".into()),
            tool_call_id: Some("c1".into()),
            ..RequestMessage::default()
        };
        let m = tool_result_message(&tool, "3".into());
        assert_eq!(m.role, Role::User);
        assert_eq!(m.content, "Result of add (call c1):\n3");
        let mut msgs = vec![Message {
            role: Role::User,
            content: "hi".into(),
        }];
        add_instructions(&mut msgs, &tools(json!("required")));
        assert_eq!(msgs[0].role, Role::System);
        assert!(msgs[0]
            .content
            .contains("transfer_to_math: Hand off to math."));
        assert!(msgs[0].content.contains("Call one of them now"));
    }
}

//! Reading an OpenAI chat-completions body (`POST /v1/chat/completions`) into a
//! [`ChatRequest`]: the body is read as the wire type maslens' own client writes
//! ([`maslens_llm::openai_wire::ChatBody`], whose errors name the field), then checked for what a
//! type cannot say (ranges, roles, tool calls) and turned into the request the model runs.

use maslens_llm::openai_wire::{ChatBody, Content, RequestMessage, ResponseFormat};
use maslens_llm::{ChatRequest, Message, Role};
use serde_json::{json, Value};

use crate::{tools, DEFAULT_MAX_TOKENS};

/// A parsed `/v1/chat/completions` body.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedRequest {
    pub request: ChatRequest,
    pub stream: bool,
    /// `tools` / `tool_choice` ([`tools`]): the answer may be a tool call.
    pub tools: Option<tools::Tools>,
}

/// Turn an OpenAI chat-completions body into a [`ChatRequest`]; the error says which field is wrong.
///
/// Departures from OpenAI: `temperature` defaults to 0 (greedy, deterministic) rather than 1;
/// `max_tokens` defaults to [`DEFAULT_MAX_TOKENS`]; a non-standard `grammar` field (GBNF, as
/// llama.cpp's server takes it) is honoured. `tools`, `tool_choice`, `tool` messages and
/// assistant `tool_calls` are read as [`tools`] says.
pub fn parse_request(v: &Value) -> Result<ParsedRequest, String> {
    if !v.is_object() {
        return Err("the body must be a JSON object".into());
    }
    let body = ChatBody::read(v)?;
    let mut messages = parse_messages(&body.messages)?;
    let tools = tools::parse_tools(body.tools.as_ref(), body.tool_choice.as_ref())?;
    if let Some(t) = &tools {
        tools::add_instructions(&mut messages, t);
    }
    let mut request = ChatRequest::new(messages);
    request.seed = None;
    parse_sampling(&body, &mut request)?;
    parse_output_format(&body, &mut request)?;
    if let Some(schema) = tools.as_ref().and_then(tools::Tools::call_schema) {
        if request.json_schema.is_some() || request.grammar.is_some() {
            return Err(
                "`tool_choice` forces a tool call, which cannot be combined with `response_format` or `grammar`"
                    .into(),
            );
        }
        request.json_schema = Some(schema);
    }
    request.stage = "serve".into();
    Ok(ParsedRequest {
        request,
        stream: body.stream.unwrap_or(false),
        tools,
    })
}

/// `messages`: non-empty, each read by [`parse_message`].
fn parse_messages(messages: &[RequestMessage]) -> Result<Vec<Message>, String> {
    if messages.is_empty() {
        return Err("`messages` is empty".into());
    }
    (messages.iter().enumerate())
        .map(|(i, m)| parse_message(i, m))
        .collect()
}

/// `messages[i]`: its role, its text, a `tool` result or an assistant's `tool_calls` as text.
fn parse_message(i: usize, m: &RequestMessage) -> Result<Message, String> {
    let role = match m.role.as_str() {
        "system" | "developer" => Role::System,
        "user" | "tool" => Role::User,
        "assistant" => Role::Assistant,
        other => return Err(format!("messages[{i}].role {other:?} is not supported (system, developer, user, assistant, tool)")),
    };
    let content = message_content(i, m.content.as_ref())?;
    if m.role == "tool" {
        return Ok(tools::tool_result_message(m, content));
    }
    let content = match &m.tool_calls {
        Some(calls) if !calls.is_null() && role == Role::Assistant => {
            let call_text = tools::calls_as_text(calls, i)?;
            if content.is_empty() {
                call_text
            } else {
                format!("{content}\n{call_text}")
            }
        }
        _ => content,
    };
    Ok(Message { role, content })
}

/// `messages[i].content`: a string, nothing, or text parts (joined).
fn message_content(i: usize, content: Option<&Content>) -> Result<String, String> {
    match content {
        None => Ok(String::new()),
        Some(Content::Text(s)) => Ok(s.clone()),
        Some(Content::Parts(parts)) => {
            let mut text = String::new();
            for (j, p) in parts.iter().enumerate() {
                match (p.kind.as_str(), &p.text) {
                    ("text", Some(t)) => text.push_str(t),
                    _ => {
                        return Err(format!(
                            "messages[{i}].content[{j}]: only text parts are supported"
                        ))
                    }
                }
            }
            Ok(text)
        }
    }
}

/// `temperature`, `top_p`, `max_completion_tokens` / `max_tokens`, `seed`, `stop`, `n`.
fn parse_sampling(body: &ChatBody, request: &mut ChatRequest) -> Result<(), String> {
    if let Some(t) = body.temperature {
        if !(0.0..=2.0).contains(&t) {
            return Err(format!("`temperature` {t} is outside [0, 2]"));
        }
        request.temperature = t;
    }
    if let Some(p) = body.top_p {
        if !(0.0..=1.0).contains(&p) {
            return Err(format!("`top_p` {p} is outside [0, 1]"));
        }
        request.top_p = Some(p);
    }
    request.max_tokens = max_tokens(body)?;
    request.seed = body.seed;
    request.stop = body.stop.clone().map(|s| s.into_vec()).unwrap_or_default();
    if body.n.is_some_and(|n| n != 1) {
        return Err("only `n`: 1 is supported".into());
    }
    Ok(())
}

/// `max_completion_tokens` (preferred) or `max_tokens`; [`DEFAULT_MAX_TOKENS`] when neither.
fn max_tokens(body: &ChatBody) -> Result<u32, String> {
    let given = match (body.max_completion_tokens, body.max_tokens) {
        (Some(n), _) => Some(("max_completion_tokens", n)),
        (None, Some(n)) => Some(("max_tokens", n)),
        (None, None) => None,
    };
    match given {
        None => Ok(DEFAULT_MAX_TOKENS),
        Some((key, 0)) => Err(format!("`{key}` must be at least 1, got 0")),
        Some((key, n)) => u32::try_from(n).map_err(|_| {
            format!(
                "`{key}` {n} is too large: at most {} (an answer also ends where the model's \
                 context window does; leave it out for the default of {DEFAULT_MAX_TOKENS})",
                u32::MAX
            )
        }),
    }
}

/// `response_format` (text, a JSON object, a JSON schema) and the non-standard `grammar`.
fn parse_output_format(body: &ChatBody, request: &mut ChatRequest) -> Result<(), String> {
    match &body.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) => request.json_schema = Some(json!({"type": "object"})),
        Some(ResponseFormat::JsonSchema { json_schema }) => {
            let schema = &json_schema.schema;
            if !schema.is_object() && !schema.is_boolean() {
                return Err(
                    "`response_format.json_schema.schema` must be a JSON schema object".into(),
                );
            }
            request.json_schema = Some(schema.clone());
        }
    }
    request.grammar.clone_from(&body.grammar);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::completion_json_with;
    use maslens_llm::ChatResponse;

    #[test]
    fn parses_an_openai_body() {
        let body = json!({
            "model": "whatever",
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "there"}]}
            ],
            "temperature": 0.5, "top_p": 0.9, "max_completion_tokens": 7, "seed": 3,
            "stop": "END",
            "response_format": {"type": "json_schema", "json_schema": {"name": "v", "schema": {"type": "object"}}}
        });
        let p = parse_request(&body).unwrap();
        assert!(!p.stream);
        let r = p.request;
        assert_eq!(
            r.messages,
            vec![Message::system("be brief"), Message::user("hello there")]
        );
        assert_eq!(
            (r.temperature, r.top_p, r.max_tokens, r.seed),
            (0.5, Some(0.9), 7, Some(3))
        );
        assert_eq!(r.stop, vec!["END".to_string()]);
        assert_eq!(r.json_schema, Some(json!({"type": "object"})));
    }

    #[test]
    fn defaults_are_greedy_and_bounded() {
        let p = parse_request(
            &json!({"messages": [{"role": "user", "content": "hi"}], "stream": true}),
        )
        .unwrap();
        assert!(p.stream);
        assert_eq!(p.request.temperature, 0.0);
        assert_eq!(p.request.max_tokens, DEFAULT_MAX_TOKENS);
        assert_eq!(p.request.json_schema, None);
    }

    #[test]
    fn tool_requests_render_history_and_constrain_forced_calls() {
        let body = json!({
            "messages": [
                {"role": "system", "content": "You triage."},
                {"role": "user", "content": "2+3?"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                  "function": {"name": "transfer_to_math", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "{\"assistant\": \"Math\"}"},
            ],
            "tools": [{"type": "function", "function": {"name": "transfer_to_math", "parameters":
                {"type": "object", "properties": {}, "additionalProperties": false}}}],
            "tool_choice": "required",
        });
        let p = parse_request(&body).unwrap();
        let m = &p.request.messages;
        assert_eq!(m.len(), 4);
        assert!(m[0]
            .content
            .starts_with("You triage.\n\nYou can call these functions:"));
        assert_eq!(m[2].role, Role::Assistant);
        assert_eq!(
            m[2].content,
            r#"{"name": "transfer_to_math", "arguments": {}}"#
        );
        assert_eq!(m[3].role, Role::User);
        assert!(m[3].content.starts_with("Result of call c1:"));
        let schema = p.request.json_schema.unwrap();
        assert_eq!(schema["properties"]["name"]["const"], "transfer_to_math");
        // A forced call's answer comes back as tool_calls.
        let r = ChatResponse {
            text: r#"{"name": "transfer_to_math", "arguments": {}}"#.into(),
            finish_reason: "stop".into(),
            usage: Default::default(),
            latency_ms: 0,
            from_cache: false,
            queue: Default::default(),
        };
        let calls = p.tools.as_ref().unwrap().calls_in(&r.text, "chatcmpl-1");
        let j = completion_json_with("m", "chatcmpl-1", &r, calls);
        assert_eq!(j["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(j["choices"][0]["message"]["content"], Value::Null);
        assert_eq!(
            j["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
            "transfer_to_math"
        );
        // Without tools nothing changes: no schema, no calls.
        let plain =
            parse_request(&json!({"messages": [{"role": "user", "content": "hi"}]})).unwrap();
        assert!(plain.tools.is_none() && plain.request.json_schema.is_none());
    }

    #[test]
    fn bad_fields_are_named() {
        let cases = [
            (json!([]), "JSON object"),
            (json!({}), "messages"),
            (json!({"messages": []}), "empty"),
            (
                json!({"messages": [{"role": "function", "content": "x"}]}),
                "messages[0].role",
            ),
            (
                json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "c"}]}]}),
                "messages[0].tool_calls[0].function",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
                       "tools": [{"type": "function", "function": {"name": "f"}}],
                       "response_format": {"type": "json_object"}}),
                "cannot be combined",
            ),
            (
                json!({"messages": [{"role": "user", "content": 3}]}),
                "messages[0].content",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "temperature": 9}),
                "temperature",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}),
                "`max_tokens` must be at least 1, got 0",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5}),
                "`max_tokens`: must be a positive integer, got 1.5",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 99999999999u64}),
                "`max_tokens` 99999999999 is too large: at most 4294967295",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -3}),
                "`max_completion_tokens`: must be a positive integer, got -3",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "n": 2}),
                "`n`",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "stop": [1]}),
                "stop",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}}),
                "schema",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}}),
                "xml",
            ),
        ];
        for (body, needle) in cases {
            let err = parse_request(&body).unwrap_err();
            assert!(err.contains(needle), "{body}: {err}");
        }
    }

    /// The client's body and serve-model's reader agree: whatever request maslens' OpenAI
    /// client sends (`maslens_llm::openai::chat_body`), serve-model reads back the same messages,
    /// sampling settings and schema (the two sides of one wire format, checked as one).
    mod round_trip {
        use super::*;
        use maslens_llm::openai::{chat_body, SchemaMode};
        use proptest::prelude::*;

        fn message() -> impl Strategy<Value = Message> {
            (
                prop_oneof![Just(Role::System), Just(Role::User), Just(Role::Assistant)],
                "[ -~\n\u{e9}\u{4e2d}]{0,40}",
            )
                .prop_map(|(role, content)| Message { role, content })
        }

        fn request() -> impl Strategy<Value = ChatRequest> {
            (
                proptest::collection::vec(message(), 1..5),
                (0u8..=8).prop_map(|q| f32::from(q) * 0.25),
                proptest::option::of((1u8..=20).prop_map(|q| f32::from(q) * 0.05)),
                1u32..=8192,
                proptest::option::of(any::<u32>().prop_map(u64::from)),
                proptest::collection::vec("[a-zA-Z#]{1,6}", 0..3),
                proptest::option::of(Just(
                    json!({"type": "object", "properties": {"step": {"type": "integer"}}}),
                )),
            )
                .prop_map(
                    |(messages, temperature, top_p, max_tokens, seed, stop, schema)| {
                        let mut r = ChatRequest::new(messages);
                        r.temperature = temperature;
                        r.top_p = top_p;
                        r.max_tokens = max_tokens;
                        r.seed = seed;
                        r.stop = stop;
                        r.json_schema = schema;
                        r
                    },
                )
        }

        proptest! {
            #[test]
            fn what_the_client_sends_serve_model_reads_back(sent in request()) {
                let body = chat_body("local:any", &sent, SchemaMode::JsonSchema);
                let got = parse_request(&body).map_err(TestCaseError::fail)?;
                prop_assert!(!got.stream);
                prop_assert!(got.tools.is_none());
                let got = got.request;
                prop_assert_eq!(&got.messages, &sent.messages);
                prop_assert_eq!(got.temperature, sent.temperature);
                prop_assert_eq!(got.top_p, sent.top_p);
                prop_assert_eq!(got.max_tokens, sent.max_tokens);
                prop_assert_eq!(got.seed, sent.seed);
                prop_assert_eq!(&got.stop, &sent.stop);
                prop_assert_eq!(&got.json_schema, &sent.json_schema);
            }
        }
    }
}

//! A message's `content` as the formats that carry chat messages give it (chat transcripts,
//! Who&When, Aegis): a string (or a number or boolean where a string was meant), null, or a
//! list of parts (OpenAI's `{"type":"text","text":...}`, or plain strings). Text parts are
//! joined with newlines; a part without text is noted as `[<type>]`.

use super::whowhen::Text;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(untagged, expecting = "expected a string or an array of text parts")]
pub(crate) enum Content {
    Scalar(Text),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum Part {
    Plain(String),
    Typed {
        #[serde(default, rename = "type")]
        kind: Option<String>,
        #[serde(default)]
        text: Option<String>,
    },
}

impl Content {
    /// The message's text.
    pub(crate) fn into_text(self) -> String {
        match self {
            Content::Scalar(t) => t.into_string(),
            Content::Parts(parts) => parts
                .into_iter()
                .map(|p| match p {
                    Part::Plain(t) | Part::Typed { text: Some(t), .. } => t,
                    Part::Typed { kind: Some(k), .. } => format!("[{k}]"),
                    Part::Typed { .. } => String::from("[part]"),
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// The text of an optional `content`: empty when there is none.
pub(crate) fn text_of(content: Option<Content>) -> String {
    content.map(Content::into_text).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_numbers_and_parts_become_text() {
        let text = |json: &str| text_of(serde_json::from_str(json).unwrap());
        assert_eq!(text(r#""hi""#), "hi");
        assert_eq!(text("42"), "42");
        assert_eq!(text("null"), "");
        assert_eq!(
            text(r#"[{"type":"text","text":"a"},"b",{"type":"image_url"},{}]"#),
            "a\nb\n[image_url]\n[part]"
        );
        assert!(serde_json::from_str::<Content>(r#"{"text":"x"}"#).is_err());
    }
}

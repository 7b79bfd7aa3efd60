//! LLM critics: AgentTurnEval (appendix B.1) for role utterances, the same protocol for the
//! round-t aggregation output S_t (q_agg_t), and the peer-view judge over a whole round U_t
//! (p_{i,t}).
//!
//! The critic output is parsed strictly. Besides the schema (label from the 9-label taxonomy,
//! integer score 0-5), the parser enforces the paper's consistency rules: a correct answer has
//! label `NONE`, an incorrect one does not; the score lies in the band of the scoring rules
//! (correct: 3-5, incorrect: 0-2); and the critic's correctness agrees with the fixed answer rule
//! (which the critic cannot overrule). A violation gets one repair call quoting the rule; a second
//! violation is an abstention, recorded as such, whose score falls back to the band midpoint of
//! the answer-rule outcome (correct 4, incorrect 1) with no label.

use crate::answer::option_letters;
use crate::config::Decoding;
use crate::data::Mcq;
use crate::debate::{question_blocks, Utterance};
use crate::CreditError;
use maslens_llm::prompt::{untrusted, Template};
use maslens_llm::structured::extract_json;
use maslens_llm::typed::{complete_as, from_value, lenient};
use maslens_llm::{prompt_template, ChatModel, ChatRequest, Message};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;

pub const AGENT_TURN_EVAL: Template = prompt_template!("credit/agent_turn_eval.v1");
pub const AGENT_TURN_EVAL_INPUT: Template = prompt_template!("credit/agent_turn_eval_input.v1");
pub const AGGREGATOR_EVAL: Template = prompt_template!("credit/aggregator_eval.v1");
pub const PEER_VIEW_JUDGE: Template = prompt_template!("credit/peer_view_judge.v1");
pub const PEER_VIEW_JUDGE_INPUT: Template = prompt_template!("credit/peer_view_judge_input.v1");

/// The failure-pattern taxonomy of AgentTurnEval (B.1), `NONE` last.
pub const FAILURE_LABELS: [&str; 9] = [
    "DOMAIN_MISMATCH",
    "KNOWLEDGE_DEFICIT",
    "MISINTERPRET_QUESTION",
    "INCOMPLETE_REASONING",
    "OVERGENERALIZATION",
    "MISALIGNED_OBJECTIVE",
    "INSUFFICIENT_JUSTIFICATION",
    "RANDOM_OR_UNGROUNDED",
    "NONE",
];

/// The label of a correct answer.
pub const NONE_LABEL: &str = "NONE";

/// One critic verdict on one answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnEval {
    /// Correctness under the answer rule.
    pub correct: bool,
    /// Failure pattern; `None` when the critic abstained on an incorrect answer.
    pub label: Option<String>,
    pub explanation: String,
    /// Integer score 0-5.
    pub score: u8,
    /// True when the critic's answer could not be used and the fallback score was taken.
    #[serde(default)]
    pub abstained: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abstain_reason: Option<String>,
    /// Calls made (1, or 2 with a repair).
    #[serde(default)]
    pub calls: u32,
}

impl TurnEval {
    /// Normalized score q in [0, 1].
    pub fn q(&self) -> f64 {
        f64::from(self.score) / 5.0
    }
    /// The fallback verdict used when the critic abstains.
    pub fn fallback(correct: bool, reason: String, calls: u32) -> Self {
        TurnEval {
            correct,
            label: correct.then(|| NONE_LABEL.to_string()),
            explanation: String::new(),
            score: if correct { 4 } else { 1 },
            abstained: true,
            abstain_reason: Some(reason),
            calls,
        }
    }
}

/// JSON schema of the AgentTurnEval answer.
pub fn turn_eval_schema() -> Value {
    json!({
        "type": "object",
        "required": ["correctness", "failure_pattern", "explanation", "score"],
        "properties": {
            "correctness": {"type": "string", "enum": ["correct", "incorrect"]},
            "failure_pattern": {"type": "string", "enum": FAILURE_LABELS},
            "explanation": {"type": "string"},
            "score": {"type": "integer", "minimum": 0, "maximum": 5}
        },
        "additionalProperties": false
    })
}

/// The AgentTurnEval answer (`turn_eval_schema`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnEvalAnswer {
    #[serde(default)]
    pub correctness: String,
    #[serde(default)]
    pub failure_pattern: String,
    #[serde(default)]
    pub explanation: String,
    #[serde(default, deserialize_with = "lenient::uint")]
    pub score: Option<u64>,
}

/// Read the paper's line format ("Final answer correctness: ...", "Primary failure or risk
/// pattern: ...", "Brief explanation: ...", "Score: ...") into the JSON shape.
pub fn lines_to_json(text: &str) -> Option<Value> {
    let mut obj = serde_json::Map::new();
    for line in text.lines() {
        let line = line.trim().trim_start_matches(['-', '*', ' ']);
        let Some((key, val)) = line.split_once(':') else {
            continue;
        };
        let key = key.to_ascii_lowercase();
        let val = val.trim().trim_matches(['"', '*', '.', ' ']);
        if key.contains("correctness") {
            obj.insert("correctness".into(), json!(val.to_ascii_lowercase()));
        } else if key.contains("pattern") {
            obj.insert("failure_pattern".into(), json!(val.to_ascii_uppercase()));
        } else if key.contains("explanation") {
            obj.insert("explanation".into(), json!(val));
        } else if key.trim() == "score" {
            let n: Option<i64> = val
                .split(|c: char| !c.is_ascii_digit())
                .find(|s| !s.is_empty())
                .and_then(|s| s.parse().ok());
            if let Some(n) = n {
                obj.insert("score".into(), json!(n));
            }
        }
    }
    (obj.len() == 4).then_some(Value::Object(obj))
}

/// Parse and check one critic answer against the schema and the consistency rules.
/// `known_correct` is the verdict of the fixed answer rule.
pub fn parse_turn_eval(value: &Value, known_correct: bool) -> Result<TurnEval, String> {
    let TurnEvalAnswer {
        correctness,
        failure_pattern: label,
        explanation,
        score,
    } = from_value(value, &turn_eval_schema())?;
    let correctness = correctness.as_str();
    // A score of 4.0 passes the schema as an integer but is not read as one: out of band.
    let score = score.unwrap_or(99);
    let says_correct = correctness == "correct";
    if says_correct != known_correct {
        return Err(format!(
            "correctness is \"{correctness}\" but under the fixed answer rule the answer is {}",
            if known_correct {
                "correct"
            } else {
                "incorrect"
            }
        ));
    }
    if says_correct && label != NONE_LABEL {
        return Err(format!(
            "the answer is correct, so failure_pattern MUST be \"NONE\" (got \"{label}\")"
        ));
    }
    if !says_correct && label == NONE_LABEL {
        return Err("the answer is incorrect, so failure_pattern MUST NOT be \"NONE\"".to_string());
    }
    let band = if says_correct { 3..=5 } else { 0..=2 };
    if !band.contains(&score) {
        return Err(format!(
            "score {score} contradicts the scoring rules: a {} answer scores {}-{}",
            correctness,
            band.start(),
            band.end()
        ));
    }
    Ok(TurnEval {
        correct: known_correct,
        label: Some(label),
        explanation,
        score: score as u8,
        abstained: false,
        abstain_reason: None,
        calls: 0,
    })
}

fn check_text(text: &str, known_correct: bool) -> Result<TurnEval, String> {
    let value = extract_json(text)
        .or_else(|| lines_to_json(text))
        .ok_or_else(|| "no JSON object found in the answer".to_string())?;
    parse_turn_eval(&value, known_correct)
}

fn letters_list(n: usize) -> String {
    let l: Vec<String> = option_letters(n).iter().map(|c| c.to_string()).collect();
    match l.len() {
        0 | 1 => l.join(""),
        _ => format!("{}, and {}", l[..l.len() - 1].join(", "), l[l.len() - 1]),
    }
}

/// What is being evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// A role's utterance (AgentTurnEval, B.1).
    Agent,
    /// A round's aggregation output S_t.
    Aggregator,
}

/// Evaluate one answer text. `known_correct` comes from the fixed answer rule.
#[allow(clippy::too_many_arguments)]
pub async fn turn_eval(
    model: &dyn ChatModel,
    subject: Subject,
    q: &Mcq,
    answer_text: &str,
    known_correct: bool,
    dec: &Decoding,
    repair: bool,
    stage: &str,
) -> Result<TurnEval, CreditError> {
    let letters = letters_list(q.options.len());
    let system = match subject {
        Subject::Agent => AGENT_TURN_EVAL.render(json!({ "letters": letters }))?,
        Subject::Aggregator => AGGREGATOR_EVAL.render(json!({ "letters": letters }))?,
    };
    let (question, options) = question_blocks(q);
    let (subject_name, title, label) = match subject {
        Subject::Agent => (
            "agent's final answer",
            "Final answer of the debating agent",
            "agent_answer",
        ),
        Subject::Aggregator => (
            "aggregation output",
            "Shared state written by the aggregation module",
            "aggregation_output",
        ),
    };
    let user = AGENT_TURN_EVAL_INPUT.render(json!({
        "subject": subject_name, "subject_title": title, "question": question, "options": options,
        "gold": q.answer.to_string(), "answer": untrusted(label, answer_text),
    }))?;
    let mut req = ChatRequest::new(vec![Message::system(system), Message::user(user)])
        .max_tokens(dec.max_tokens)
        .temperature(dec.temperature)
        .json_schema(turn_eval_schema())
        .stage(stage)
        .template(match subject {
            Subject::Agent => AGENT_TURN_EVAL.name,
            Subject::Aggregator => AGGREGATOR_EVAL.name,
        });
    req.top_p = dec.top_p;
    let first = model.complete(&req).await?;
    let problem = match check_text(&first.text, known_correct) {
        Ok(mut e) => {
            e.calls = 1;
            return Ok(e);
        }
        Err(p) => p,
    };
    if !repair {
        return Ok(TurnEval::fallback(known_correct, problem, 1));
    }
    req.messages.push(Message::assistant(first.text.clone()));
    req.messages.push(Message::user(format!(
        "Your answer was not valid: {problem}. Answer again with only one JSON object with the fields \
         correctness, failure_pattern, explanation and score, following the consistency and scoring rules."
    )));
    req.stage = format!("{stage}/repair");
    let second = model.complete(&req).await?;
    match check_text(&second.text, known_correct) {
        Ok(mut e) => {
            e.calls = 2;
            Ok(e)
        }
        Err(p2) => Ok(TurnEval::fallback(
            known_correct,
            format!("invalid after one repair: {p2} (first answer: {problem})"),
            2,
        )),
    }
}

/// Peer-view scores of one round: p_{i,t} in [0, 1] per role (`None` where the judge gave none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerView {
    pub scores: Vec<Option<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abstain_reason: Option<String>,
    pub calls: u32,
}

/// JSON schema of the peer-view judge answer for the given agents.
pub fn peer_schema(agents: &[String]) -> Value {
    let props: serde_json::Map<String, Value> = agents
        .iter()
        .map(|a| {
            (
                a.clone(),
                json!({"type": "integer", "minimum": 0, "maximum": 5}),
            )
        })
        .collect();
    json!({
        "type": "object",
        "required": ["scores"],
        "properties": {"scores": {"type": "object", "required": agents, "properties": props, "additionalProperties": false}},
        "additionalProperties": false
    })
}

/// The peer-view judge's answer (`peer_schema`): a score per agent.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerAnswer {
    /// Agent -> score as written (`None` when not an integer).
    #[serde(default, deserialize_with = "lenient::uint_map")]
    pub scores: BTreeMap<String, Option<u64>>,
}

/// Read peer scores (normalized to [0, 1]) for `agents` from a validated answer.
pub fn parse_peer(answer: &PeerAnswer, agents: &[String]) -> Vec<Option<f64>> {
    agents
        .iter()
        .map(|a| {
            answer
                .scores
                .get(a)
                .copied()
                .flatten()
                .filter(|s| *s <= 5)
                .map(|s| s as f64 / 5.0)
        })
        .collect()
}

/// The peer-view judge over the whole round U_t.
pub async fn peer_view(
    model: &dyn ChatModel,
    q: &Mcq,
    round: usize,
    utts: &[Utterance],
    dec: &Decoding,
    stage: &str,
) -> Result<PeerView, CreditError> {
    let agents: Vec<String> = utts.iter().map(|u| u.role.clone()).collect();
    let (question, options) = question_blocks(q);
    let msgs: Vec<String> = utts
        .iter()
        .map(|u| format!("{}:\n{}", u.role, untrusted("agent_message", &u.text)))
        .collect();
    let system = PEER_VIEW_JUDGE.render(json!({}))?;
    let user = PEER_VIEW_JUDGE_INPUT.render(json!({
        "question": question, "options": options, "gold": q.answer.to_string(),
        "round": round + 1, "utterances": msgs, "agents": agents.join(", "),
    }))?;
    let mut req = ChatRequest::new(vec![Message::system(system), Message::user(user)])
        .max_tokens(dec.max_tokens)
        .temperature(dec.temperature)
        .stage(stage)
        .template(PEER_VIEW_JUDGE_INPUT.name);
    req.top_p = dec.top_p;
    let schema = peer_schema(&agents);
    let out = complete_as::<PeerAnswer>(model, req, &schema).await?;
    Ok(match out.value {
        Some(v) => PeerView {
            scores: parse_peer(&v, &agents),
            abstain_reason: None,
            calls: out.calls,
        },
        None => PeerView {
            scores: vec![None; agents.len()],
            abstain_reason: out.abstain_reason,
            calls: out.calls,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_llm::testing::ScriptedModel;

    fn v(c: &str, l: &str, s: i64) -> Value {
        json!({"correctness": c, "failure_pattern": l, "explanation": "x", "score": s})
    }

    #[test]
    fn parser_accepts_consistent_answers() {
        let e = parse_turn_eval(&v("correct", "NONE", 5), true).unwrap();
        assert_eq!((e.score, e.label.as_deref(), e.q()), (5, Some("NONE"), 1.0));
        let e = parse_turn_eval(&v("incorrect", "KNOWLEDGE_DEFICIT", 1), false).unwrap();
        assert_eq!(e.label.as_deref(), Some("KNOWLEDGE_DEFICIT"));
        assert!((e.q() - 0.2).abs() < 1e-12);
    }

    #[test]
    fn parser_enforces_consistency_rules() {
        // correct => NONE
        assert!(
            parse_turn_eval(&v("correct", "OVERGENERALIZATION", 4), true)
                .unwrap_err()
                .contains("MUST be \"NONE\"")
        );
        // incorrect => not NONE
        assert!(parse_turn_eval(&v("incorrect", "NONE", 1), false)
            .unwrap_err()
            .contains("MUST NOT"));
        // score bands
        assert!(parse_turn_eval(&v("correct", "NONE", 2), true)
            .unwrap_err()
            .contains("scoring rules"));
        assert!(
            parse_turn_eval(&v("incorrect", "KNOWLEDGE_DEFICIT", 4), false)
                .unwrap_err()
                .contains("scoring rules")
        );
        // the answer rule wins over the critic's correctness
        assert!(parse_turn_eval(&v("correct", "NONE", 5), false)
            .unwrap_err()
            .contains("fixed answer rule"));
        // schema: unknown label, out-of-range or non-integer score
        assert!(parse_turn_eval(&v("incorrect", "BAD_LUCK", 1), false).is_err());
        assert!(parse_turn_eval(&v("correct", "NONE", 6), true).is_err());
        assert!(parse_turn_eval(&json!({"correctness": "correct", "failure_pattern": "NONE", "explanation": "x", "score": 4.5}), true).is_err());
    }

    #[test]
    fn reads_the_papers_line_format() {
        let text = "- Final answer correctness: incorrect\n- Primary failure or risk pattern: MISINTERPRET_QUESTION\n- Brief explanation: It ignored the constraint.\n- Score: 2";
        let e = parse_turn_eval(&lines_to_json(text).unwrap(), false).unwrap();
        assert_eq!(e.label.as_deref(), Some("MISINTERPRET_QUESTION"));
        assert_eq!(e.score, 2);
        assert!(lines_to_json("Score: 3").is_none());
    }

    fn q() -> Mcq {
        Mcq {
            id: "q".into(),
            question: "Q?".into(),
            options: vec!["a".into(), "b".into(), "c".into(), "d".into()],
            answer: 'A',
            subject: None,
        }
    }

    #[tokio::test]
    async fn repair_then_fallback() {
        // Fixture: first answer breaks the NONE rule, the repair is consistent.
        let m = ScriptedModel::new("fixture")
            .then(r#"{"correctness":"incorrect","failure_pattern":"NONE","explanation":"x","score":1}"#)
            .then(r#"{"correctness":"incorrect","failure_pattern":"KNOWLEDGE_DEFICIT","explanation":"x","score":1}"#);
        let e = turn_eval(
            &m,
            Subject::Agent,
            &q(),
            "Answer: B",
            false,
            &Decoding::default(),
            true,
            "critic/turn",
        )
        .await
        .unwrap();
        assert_eq!(
            (e.calls, e.abstained, e.label.as_deref()),
            (2, false, Some("KNOWLEDGE_DEFICIT"))
        );
        let repair_msg = m.calls.lock().unwrap()[1].messages[3].content.clone();
        assert!(repair_msg.contains("MUST NOT"), "{repair_msg}");
        // Fixture: two unusable answers -> abstention with the band-midpoint fallback.
        let m = ScriptedModel::new("fixture")
            .then("no idea")
            .then("still none");
        let e = turn_eval(
            &m,
            Subject::Agent,
            &q(),
            "Answer: A",
            true,
            &Decoding::default(),
            true,
            "critic/turn",
        )
        .await
        .unwrap();
        assert!(e.abstained);
        assert_eq!((e.score, e.label.as_deref(), e.calls), (4, Some("NONE"), 2));
        let m = ScriptedModel::new("fixture").then("no idea");
        let e = turn_eval(
            &m,
            Subject::Aggregator,
            &q(),
            "Answer: C",
            false,
            &Decoding::default(),
            false,
            "critic/agg",
        )
        .await
        .unwrap();
        assert_eq!((e.score, e.label, e.calls), (1, None, 1));
    }

    #[tokio::test]
    async fn peer_view_scores_each_role() {
        let utts = vec![
            Utterance {
                role: "a".into(),
                round: 0,
                text: "Answer: A".into(),
                answer: Some('A'),
                correct: true,
            },
            Utterance {
                role: "b".into(),
                round: 0,
                text: "Answer: B".into(),
                answer: Some('B'),
                correct: false,
            },
        ];
        let m = ScriptedModel::new("fixture").then(r#"{"scores": {"a": 5, "b": 1}}"#);
        let p = peer_view(&m, &q(), 0, &utts, &Decoding::default(), "critic/peer")
            .await
            .unwrap();
        assert_eq!(p.scores, vec![Some(1.0), Some(0.2)]);
        let m = ScriptedModel::new("fixture")
            .then(r#"{"scores": {"a": 5}}"#)
            .then("nothing");
        let p = peer_view(&m, &q(), 0, &utts, &Decoding::default(), "critic/peer")
            .await
            .unwrap();
        assert_eq!(p.scores, vec![None, None]);
        assert!(p.abstain_reason.is_some());
    }
}

//! The span tree of one run, for [`crate::assemble`]: spans in start order, each one's parent
//! (looked up in its own OpenTelemetry trace), and nearest-at-or-above lookups computed once per
//! span (memoized), so that assembling is linear in the spans however deep the parent chains.

use crate::span::SpanRecord;
use std::collections::HashMap;

/// Spans of one run in start order (then end time, span id, trace id), with their parents.
pub(crate) struct Tree<'a> {
    pub spans: Vec<&'a SpanRecord>,
    /// Index of each span's parent in `spans`; `None` for a root or a parent not received.
    pub parent: Vec<Option<usize>>,
}

impl<'a> Tree<'a> {
    /// The tree of `spans`; a repeated (trace id, span id) counts once.
    pub fn new(spans: &[&'a SpanRecord]) -> Tree<'a> {
        let mut unique: HashMap<(&str, &str), &SpanRecord> = HashMap::with_capacity(spans.len());
        for s in spans {
            unique.insert((s.trace_id.as_str(), s.span_id.as_str()), *s);
        }
        let mut order: Vec<&SpanRecord> = unique.into_values().collect();
        order.sort_by(|a, b| {
            (a.start_ns, a.end_ns, &a.span_id, &a.trace_id).cmp(&(
                b.start_ns,
                b.end_ns,
                &b.span_id,
                &b.trace_id,
            ))
        });
        let index: HashMap<(&str, &str), usize> = order
            .iter()
            .enumerate()
            .map(|(i, s)| ((s.trace_id.as_str(), s.span_id.as_str()), i))
            .collect();
        let parent = order
            .iter()
            .map(|s| {
                let p = s.parent_span_id.as_deref()?;
                index.get(&(s.trace_id.as_str(), p)).copied()
            })
            .collect();
        Tree {
            spans: order,
            parent,
        }
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// For every span, the nearest `own` value at or above it (its own, else its parent's,
    /// ...). Each span is resolved once: linear in the spans. On a parent cycle, each span of
    /// the cycle takes the first value met walking up the cycle from it.
    pub fn nearest<T: Clone>(&self, own: &[Option<T>]) -> Vec<Option<T>> {
        let n = self.len();
        let mut memo: Vec<Option<Option<T>>> = vec![None; n];
        let mut on_path: HashMap<usize, usize> = HashMap::new();
        let mut path: Vec<usize> = Vec::new();
        for start in 0..n {
            if memo[start].is_some() {
                continue;
            }
            path.clear();
            on_path.clear();
            let mut cur = Some(start);
            let mut above: Option<T> = None;
            while let Some(c) = cur {
                if let Some(v) = &memo[c] {
                    above = v.clone();
                    break;
                }
                if let Some(&pos) = on_path.get(&c) {
                    // path[pos..] is a cycle: path[i]'s parent is path[i + 1], the last one's is c.
                    let cycle = path.split_off(pos);
                    for (i, node) in cycle.iter().enumerate() {
                        let v = (0..cycle.len())
                            .find_map(|k| own[cycle[(i + k) % cycle.len()]].clone());
                        memo[*node] = Some(v);
                    }
                    above = memo[c].clone().flatten();
                    break;
                }
                on_path.insert(c, path.len());
                path.push(c);
                cur = self.parent[c];
            }
            for &node in path.iter().rev() {
                let v = own[node].clone().or_else(|| above.clone());
                memo[node] = Some(v.clone());
                above = v;
            }
        }
        memo.into_iter().map(Option::flatten).collect()
    }

    /// For every span, the nearest `own` value strictly above it (its parent's at-or-above value).
    pub fn nearest_above<T: Clone>(&self, own: &[Option<T>]) -> Vec<Option<T>> {
        let at = self.nearest(own);
        self.parent
            .iter()
            .map(|p| p.and_then(|p| at[p].clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(id: &str, parent: Option<&str>, start: u64) -> SpanRecord {
        SpanRecord {
            trace_id: "ab".repeat(16),
            span_id: format!("{id:0>16}"),
            parent_span_id: parent.map(|p| format!("{p:0>16}")),
            name: id.into(),
            start_ns: start,
            end_ns: start,
            error: None,
            attributes: Default::default(),
            events: Vec::new(),
            service: None,
        }
    }

    #[test]
    fn nearest_walks_up_once_per_span_and_ends_cycles() {
        // a > b > c, and a cycle d <-> e; values on a and e.
        let spans = [
            span("a", None, 1),
            span("b", Some("a"), 2),
            span("c", Some("b"), 3),
            span("d", Some("e"), 4),
            span("e", Some("d"), 5),
        ];
        let refs: Vec<&SpanRecord> = spans.iter().collect();
        let t = Tree::new(&refs);
        let own: Vec<Option<&str>> = t
            .spans
            .iter()
            .map(|s| matches!(s.name.as_str(), "a" | "e").then_some(s.name.as_str()))
            .collect();
        assert_eq!(
            t.nearest(&own),
            [Some("a"), Some("a"), Some("a"), Some("e"), Some("e")]
        );
        assert_eq!(
            t.nearest_above(&own),
            [None, Some("a"), Some("a"), Some("e"), Some("e")]
        );
    }

    #[test]
    fn a_deep_chain_is_linear() {
        // 200,000 spans in one parent chain, the only value at the root: a per-span walk would
        // take 2 * 10^10 steps; the memo takes one pass.
        let n = 200_000;
        let spans: Vec<SpanRecord> = (0..n)
            .map(|i| {
                let parent = (i > 0).then(|| format!("{:x}", i));
                span(&format!("{:x}", i + 1), parent.as_deref(), i as u64)
            })
            .collect();
        let refs: Vec<&SpanRecord> = spans.iter().collect();
        let t = Tree::new(&refs);
        let mut own = vec![None; n];
        own[0] = Some(1u8);
        let started = std::time::Instant::now();
        let at = t.nearest(&own);
        assert!(at.iter().all(|v| *v == Some(1)));
        assert!(started.elapsed().as_secs() < 5, "{:?}", started.elapsed());
    }
}

//! Report rendering through minijinja templates kept as files (`templates/*.md.j2`,
//! `*.html.j2`, compiled in with `include_str!`), shared by every crate that writes a report.
//!
//! - One HTML page shell, `page.html.j2` (layout and CSS): a report page
//!   `{% extends "page.html.j2" %}`, sets `title` in its context and fills `{% block body %}`.
//! - One escape: minijinja's HTML auto-escaping, on for every template whose name ends in
//!   `.html.j2`. Every data string (agent names, trace ids, rationales) is passed raw in the
//!   context and escaped there; only SVG from [`crate::plot`] (whose text plotters escapes)
//!   is inserted with `|safe`.
//! - Markdown templates (`.md.j2`) are not escaped; the `cell` filter makes a string safe inside
//!   a Markdown table cell (`|` escaped, newlines as spaces).
//!
//! Blocks trim their line (`trim_blocks`, `lstrip_blocks`) and a template's last newline is kept.

use minijinja::Environment;
use serde::Serialize;

/// The shared HTML page shell.
pub const PAGE_SHELL: &str = include_str!("../templates/page.html.j2");
/// Shared HTML macros: `figure(f)` shows a [`Figure`] (`{% from "macros.html.j2" import figure %}`).
pub const MACROS: &str = include_str!("../templates/macros.html.j2");

/// A chart for a template, or why it is missing (`svg` is inserted unescaped: plotters
/// escapes the text it draws).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    pub svg: Option<String>,
    pub error: Option<String>,
}

impl From<Result<String, crate::plot::PlotError>> for Figure {
    fn from(r: Result<String, crate::plot::PlotError>) -> Self {
        match r {
            Ok(svg) => Figure {
                svg: Some(svg),
                error: None,
            },
            Err(e) => Figure {
                svg: None,
                error: Some(e.to_string()),
            },
        }
    }
}

/// A report template failed to compile or render (a bug in a compiled-in template).
#[derive(Debug, thiserror::Error)]
#[error("report template {name}: {source:#}")]
pub struct PageError {
    pub name: String,
    #[source]
    pub source: minijinja::Error,
}

/// Escape a string for a Markdown table cell.
pub fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// A template environment with the page shell, the shared macros and filters, and `templates`
/// (`(name, source)`; names ending in `.html.j2` are HTML-escaped).
pub fn environment(
    templates: &[(&'static str, &'static str)],
) -> Result<Environment<'static>, PageError> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(true);
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env.add_filter("cell", |s: String| md_cell(&s));
    let shared = [("page.html.j2", PAGE_SHELL), ("macros.html.j2", MACROS)];
    for (name, source) in shared.iter().chain(templates) {
        env.add_template(name, source).map_err(|source| PageError {
            name: name.to_string(),
            source,
        })?;
    }
    Ok(env)
}

/// Render template `name` of `env` with `ctx`.
pub fn render<S: Serialize>(
    env: &Environment<'_>,
    name: &str,
    ctx: S,
) -> Result<String, PageError> {
    env.get_template(name)
        .and_then(|t| t.render(ctx))
        .map_err(|source| PageError {
            name: name.to_string(),
            source,
        })
}

/// Build an environment of `templates` and render `name`; on a template error (a bug, as the
/// templates are compiled in and snapshot-tested) the error text stands in for the report.
pub fn render_or_note<S: Serialize>(
    templates: &[(&'static str, &'static str)],
    name: &str,
    ctx: S,
) -> String {
    match environment(templates).and_then(|env| render(&env, name, ctx)) {
        Ok(s) => s,
        Err(e) => format!("{e}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"{% extends "page.html.j2" %}{% block body %}<p>{{ name }}</p>{{ svg|safe }}{% endblock %}"#;

    #[test]
    fn html_templates_escape_data_and_keep_safe_svg() {
        let out = render_or_note(
            &[("t.html.j2", PAGE)],
            "t.html.j2",
            minijinja::context! { title => "a<b", name => "<script>x</script>", svg => "<svg></svg>" },
        );
        assert!(out.starts_with("<!DOCTYPE html>"));
        assert!(out.contains("<title>a&lt;b</title>"));
        assert!(!out.contains("<script"));
        assert!(out.contains("<svg></svg>"));
    }

    #[test]
    fn markdown_templates_are_not_escaped() {
        let out = render_or_note(
            &[("t.md.j2", "| {{ x|cell }} |\n")],
            "t.md.j2",
            minijinja::context! { x => "a|b<c>\nd" },
        );
        assert_eq!(out, "| a\\|b<c> d |\n");
    }

    #[test]
    fn template_errors_are_reported_not_panicked() {
        let out = render_or_note(&[("t.md.j2", "{{ missing }}")], "t.md.j2", ());
        assert!(out.starts_with("report template t.md.j2"), "{out}");
    }
}

//! The model catalog of `maslens model list`: the known models (present or not) and any other
//! model found in the store.

use crate::local::store::{ModelStore, KNOWN_MODELS};
use crate::LlmError;
use serde::Serialize;
use std::path::PathBuf;

/// One model of the catalog (fields in the sorted order of its JSON keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CatalogEntry {
    pub description: String,
    pub name: String,
    /// Where it is stored (`None`: not present).
    pub path: Option<PathBuf>,
    pub present: bool,
    /// The model spec that selects it (`local:NAME`).
    pub spec: String,
}

/// The known models in their order, then the other stored models.
pub fn catalog(store: &ModelStore) -> Result<Vec<CatalogEntry>, LlmError> {
    let present = store.list()?;
    let entry = |name: &str, description: &str, path: Option<PathBuf>| CatalogEntry {
        description: description.to_string(),
        name: name.to_string(),
        present: path.is_some(),
        path,
        spec: format!("local:{name}"),
    };
    let mut rows: Vec<CatalogEntry> = (KNOWN_MODELS.iter())
        .map(|k| {
            let stored = present.iter().find(|s| s.manifest.name == k.name);
            entry(k.name, k.description, stored.map(|s| s.path.clone()))
        })
        .collect();
    for s in &present {
        if KNOWN_MODELS.iter().all(|k| k.name != s.manifest.name) {
            rows.push(entry(&s.manifest.name, "", Some(s.path.clone())));
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_store_lists_every_known_model_as_absent() {
        let dir = tempfile::tempdir().unwrap();
        let rows = catalog(&ModelStore::new(dir.path())).unwrap();
        assert_eq!(rows.len(), KNOWN_MODELS.len());
        assert!(rows.iter().all(|r| !r.present && r.path.is_none()));
        assert_eq!(rows[0].spec, format!("local:{}", KNOWN_MODELS[0].name));
    }
}

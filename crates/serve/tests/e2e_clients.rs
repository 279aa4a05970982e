//! Real clients against the server over the fake engine: `tools/serve/e2e.py` drives it with the
//! `openai` package and curl, then runs a bounded load test. (`crates/tally/tests/serve.rs` runs
//! the same script against `tally serve` on the tiny model.)
//!
//! Python comes from `TALLY_E2E_PYTHON` (scripts/test.sh makes a venv with `openai`), else
//! `python3` if it imports `openai`. Without one the test fails under CI and is skipped elsewhere.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{MODEL, Server};
use tally_serve::fake::FakeEngine;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_client_curl_and_load_against_the_fake_engine() {
    let Some(py) = tally_serve::fake::e2e_python() else {
        eprintln!("skipped: no Python with the openai package (set TALLY_E2E_PYTHON)");
        return;
    };
    let mut e = FakeEngine::new(4096);
    e.token_delay = Duration::from_millis(2);
    let mut s = Server::start(e, 16).await;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let summary = root.join("target/serve-e2e/fake-load.json");
    std::fs::create_dir_all(summary.parent().unwrap()).unwrap();
    let args = vec![
        root.join("tools/serve/e2e.py")
            .to_string_lossy()
            .into_owned(),
        "--base-url".into(),
        format!("http://{}", s.addr),
        "--model".into(),
        MODEL.into(),
        "--streams".into(),
        "8".into(),
        "--seconds".into(),
        "5".into(),
        "--summary".into(),
        summary.to_string_lossy().into_owned(),
    ];
    let out = tokio::task::spawn_blocking(move || Command::new(py).args(&args).output())
        .await
        .unwrap()
        .expect("run e2e.py");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert!(
        out.status.success(),
        "e2e.py failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("e2e: all checks passed"));
    s.shutdown();
}

//! Pieces the commands share: opening a model and a subject, machine facts, writing reports.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use tally_engine::subject::TallySubject;
use tally_engine::{Session, backend};
use tally_ledger::schema::MachineInfo;
use tally_model::Model;

/// The build this binary came from.
pub const VERSION: &str = env!("TALLY_GIT_COMMIT");

/// Opens and validates a model file (every part of a split model); from here on a SIGBUS (a
/// file truncated while mapped) prints a message naming the files instead of killing the
/// process silently.
pub fn open_model(path: &Path) -> Result<Arc<Model>> {
    let model = Model::open(path).with_context(|| format!("loading {}", path.display()))?;
    crate::signals::watch_mapped(&model.file.part_paths());
    test_truncate_hook(path);
    Ok(Arc::new(model))
}

/// Test builds only: `TALLY_TEST_TRUNCATE_MAPPED=1` truncates the model file to its first page
/// right after mapping it, so the CLI tests can provoke the real SIGBUS of a file truncated
/// while mapped without racing another process.
#[cfg(debug_assertions)]
fn test_truncate_hook(path: &Path) {
    if std::env::var_os("TALLY_TEST_TRUNCATE_MAPPED").is_some()
        && let Ok(f) = std::fs::OpenOptions::new().write(true).open(path)
    {
        let _ = f.set_len(4096);
    }
}
#[cfg(not(debug_assertions))]
fn test_truncate_hook(_: &Path) {}

/// On the CUDA backend's first use with this NVRTC release and build, says on stderr that its
/// kernels are about to be compiled (up to about a minute on a GPU host) and how to do that
/// ahead of time, so the pause is not silent. Nothing for other backends or when all is cached.
pub fn compile_note(backend_name: &str) {
    if backend_name == "cuda"
        && let Some((arch, missing, dir)) = tally_engine::cuda::pending_compile()
    {
        eprintln!(
            "note: compiling {} CUDA kernel source(s) for {arch} into {} (first use with this NVRTC \
             and build: up to about a minute; `tally kernels --arch {arch}` does this ahead of time)",
            missing.len(),
            dir.display()
        );
    }
}

/// Opens a backend by name (`tally_engine::backend::open`), after [`compile_note`].
pub fn open_backend(
    name: &str,
    model: Arc<Model>,
    threads: usize,
) -> Result<Box<dyn tally_engine::Backend>> {
    compile_note(name);
    Ok(backend::open(name, model, threads)?)
}

/// tally on `backend` as a ledger subject, with state for `max_ctx` positions.
pub fn tally_subject(
    model: &Arc<Model>,
    backend_name: &str,
    threads: usize,
    max_ctx: usize,
    prune: bool,
) -> Result<TallySubject<Box<dyn tally_engine::Backend>>> {
    let b = open_backend(backend_name, model.clone(), threads)?;
    let mut s = Session::new(model.clone(), b, max_ctx)?;
    s.opts.prune_last_layer = prune;
    // The measuring commands analyse one plan of the whole prompt (graph export, replay and
    // end-to-end time must describe the same plan); `bench` sets its own `--ubatch`.
    s.ubatch = 0;
    Ok(TallySubject::new(s, VERSION.to_string()))
}

/// This machine's facts, with the peaks measured on `backend`.
pub fn machine(backend_name: &str) -> MachineInfo {
    let mut m = tally_ledger::machine::local_machine();
    let peaks = tally_engine::peaks::measure(backend_name);
    m.peak_gbps = peaks.gbps;
    m.peak_tflops = peaks.tflops;
    m.peak_method = Some(peaks.method);
    m.gpu = peaks.gpu;
    m
}

/// Writes `text` to `dir/name`, creating `dir`.
pub fn write_file(dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let p = dir.join(name);
    std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
    Ok(p)
}

/// A spinner on stderr for long measurements (hidden when stderr is not a terminal).
pub fn spinner(what: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new_spinner();
    pb.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    pb.set_message(what.to_string());
    pb.enable_steady_tick(std::time::Duration::from_millis(200));
    pb
}

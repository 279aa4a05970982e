//! Two signals a CLI must handle itself.
//!
//! - SIGPIPE: Rust ignores it, so `tally ... | head` turns the closed pipe into an `EPIPE` error
//!   and `println!` panics. The default action (end the process quietly, as `cat` does) is
//!   restored at start.
//! - SIGBUS: model files are memory-mapped; if another process truncates the file while tally
//!   reads it, the next read of a page past the new end faults with SIGBUS, which by default
//!   ends the process with no message (exit 135). The handler writes one preformatted line that
//!   names the file and exits with [`crate::exit::MAPPED_FILE_CHANGED`].

use std::sync::atomic::{AtomicPtr, Ordering};

/// The message the SIGBUS handler writes, published as one pointer to a leaked (never freed)
/// slice, so the handler reads a consistent pointer and length that stay valid.
static BUS_MSG: AtomicPtr<&'static [u8]> = AtomicPtr::new(std::ptr::null_mut());

const GENERIC: &[u8] = b"error: SIGBUS: a memory-mapped file could no longer be read \
(was it truncated or overwritten while tally ran?)\n";

/// Installs both handlers. Called once at the start of `main`.
pub fn install() {
    // SAFETY: FFI call with valid arguments: restores the default disposition of SIGPIPE
    // before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // SAFETY: `sigaction` is given a zeroed, fully initialised struct whose handler is an
    // `extern "C"` function that only calls async-signal-safe functions (write, _exit) on
    // memory that is never freed.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigbus as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
    }
}

/// Names the mapped files in the SIGBUS message (call once they are mapped: a model file, or
/// every part of a split model). Each call leaks the few bytes of one message; commands map one
/// or two models.
pub fn watch_mapped(paths: &[&std::path::Path]) {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let msg = format!(
        "error: {}: the model file changed while tally had it mapped (truncated or overwritten: \
         SIGBUS reading it); nothing after this point can be trusted. Do not modify a model \
         file while tally reads it.\n",
        names.join(" or ")
    );
    let bytes: &'static [u8] = Box::leak(msg.into_bytes().into_boxed_slice());
    BUS_MSG.store(Box::leak(Box::new(bytes)), Ordering::SeqCst);
}

extern "C" fn on_sigbus(_sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let p = BUS_MSG.load(Ordering::SeqCst);
    // SAFETY: `p` is null or was leaked by `watch_mapped` and is never freed or changed.
    let msg: &[u8] = if p.is_null() { GENERIC } else { unsafe { *p } };
    // SAFETY: write(2) and _exit(2) are async-signal-safe; `msg` is valid for its length.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(crate::exit::MAPPED_FILE_CHANGED);
    }
}

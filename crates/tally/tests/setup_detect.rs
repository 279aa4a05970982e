//! `scripts/setup.sh` decides whether to install libclang-dev by asking
//! `scripts/lib/find-libclang.sh` for the file bindgen loads. These tests run that detection
//! against fake roots: an image that ships only the C++ interface (`libclang-cpp.so.14`, as
//! Debian's base image does) must be found wanting, so the package gets installed.

use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/lib/find-libclang.sh")
}

/// Runs the detection against `root`; returns (found, printed path).
fn detect(root: &Path) -> (bool, String) {
    let o = Command::new("bash")
        .arg(script())
        .arg("--root")
        .arg(root)
        .env_remove("LIBCLANG_PATH")
        .output()
        .expect("run find-libclang.sh");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).trim().to_string(),
    )
}

/// A file that starts like a shared library (the detection reads the ELF magic).
fn fake_elf(path: &Path) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, b"\x7fELF\x02\x01\x01\0fake").expect("write");
}

#[test]
fn only_the_cpp_interface_is_not_libclang() {
    let root = tempfile::tempdir().expect("tempdir");
    fake_elf(&root.path().join("usr/lib/llvm-14/lib/libclang-cpp.so.14"));
    fake_elf(
        &root
            .path()
            .join("usr/lib/x86_64-linux-gnu/libclang-cpp.so.14"),
    );
    assert_eq!(detect(root.path()), (false, String::new()));
}

#[test]
fn an_empty_root_has_no_libclang() {
    let root = tempfile::tempdir().expect("tempdir");
    assert!(!detect(root.path()).0);
}

#[test]
fn a_dangling_link_or_a_non_library_is_not_libclang() {
    let root = tempfile::tempdir().expect("tempdir");
    let lib = root.path().join("usr/lib/llvm-14/lib");
    std::fs::create_dir_all(&lib).expect("mkdir");
    std::os::unix::fs::symlink(lib.join("libclang.so.1"), lib.join("libclang.so")).expect("link");
    std::fs::write(lib.join("libclang-14.so"), b"not a library").expect("write");
    assert!(!detect(root.path()).0);
}

#[test]
fn libclang_dev_layouts_are_found() {
    // Debian's libclang1-14 + libclang-dev: a versioned file and links to it.
    let root = tempfile::tempdir().expect("tempdir");
    let lib = root.path().join("usr/lib/llvm-14/lib");
    fake_elf(&lib.join("libclang-cpp.so.14"));
    fake_elf(&lib.join("libclang.so.1"));
    let (found, path) = detect(root.path());
    assert!(found);
    assert!(
        path.ends_with("usr/lib/llvm-14/lib/libclang.so.1"),
        "{path}"
    );

    // The multiarch directory and a `libclang-N.so` name.
    let root = tempfile::tempdir().expect("tempdir");
    let lib = root.path().join("usr/lib/x86_64-linux-gnu");
    fake_elf(&lib.join("libclang-14.so.14.0.6"));
    std::os::unix::fs::symlink(
        lib.join("libclang-14.so.14.0.6"),
        lib.join("libclang-14.so"),
    )
    .expect("link");
    assert!(detect(root.path()).0);
}

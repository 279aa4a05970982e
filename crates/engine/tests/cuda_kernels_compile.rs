//! Every CUDA kernel source compiles with NVRTC for sm_90a, with the host's checks appended (each
//! argument struct's layout against its `#[repr(C)]` mirror, the launch geometry against the
//! kernels' formulas) and the host's constants as `-D` defines, exactly as the backend builds
//! them; and a wrong offset fails the build. With TALLY_CUBIN_DIR set, the CUBINs are written
//! there (`<source>.cubin`) for the PDL audit of their machine code (tools/cuda/pdl_audit.sh). Runs wherever libnvrtc and the CUDA headers are
//! found (CI installs them from PyPI wheels); says so and passes where they are not, unless
//! TALLY_REQUIRE_NVRTC is set.

use std::path::PathBuf;

use tally_engine::EngineError;
use tally_engine::cuda::compile::{
    SOURCES, compile_uncached, cuda_include_dir, options, source_text,
};
use tally_engine::cuda::kernels::Kernels;

/// The CUDA headers, or None (the test passes) where NVRTC is absent.
fn nvrtc() -> Option<PathBuf> {
    // SAFETY: probing for the NVRTC library has no preconditions.
    let present = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    let include = cuda_include_dir();
    if !present || include.is_none() {
        assert!(
            std::env::var_os("TALLY_REQUIRE_NVRTC").is_none(),
            "NVRTC or CUDA headers missing but TALLY_REQUIRE_NVRTC is set"
        );
        eprintln!("skipped: NVRTC (libnvrtc.so) or CUDA headers not found");
        return None;
    }
    include
}

#[test]
fn every_kernel_source_compiles_for_sm_90a() {
    let Some(include) = nvrtc() else { return };
    let opts = options("sm_90a", &include);
    let mut cubins = Vec::new();
    for src in SOURCES {
        let text = source_text(src).expect("source");
        assert!(
            text.contains("offset differs from args.rs"),
            "{}: no layout checks appended",
            src.name
        );
        let cubin = compile_uncached(src.name, &text, &opts)
            .unwrap_or_else(|e| panic!("{}: {e}", src.name));
        assert!(cubin.len() > 1000, "{}: suspiciously small CUBIN", src.name);
        cubins.push((src.name, cubin));
    }
    // The exact machine code the backend would load, for tools/cuda/pdl_audit.sh (scripts/test.sh
    // sets TALLY_CUBIN_DIR and audits it after the tests).
    if let Some(dir) = std::env::var_os("TALLY_CUBIN_DIR") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("TALLY_CUBIN_DIR");
        for (name, cubin) in &cubins {
            std::fs::write(dir.join(format!("{name}.cubin")), cubin).expect("write cubin");
        }
    }
    // Every kernel the backend resolves when it opens is a symbol of the source it names (a
    // misspelt or moved kernel fails here, not on the GPU's first call): the symbol table holds
    // each name between NULs.
    let found = std::cell::RefCell::new(Vec::new());
    let resolve = |src: &'static str, name: &'static str| {
        let (_, cubin) = cubins
            .iter()
            .find(|(n, _)| *n == src)
            .ok_or_else(|| EngineError::Internal(format!("no source {src}")))?;
        let sym = [b"\0", name.as_bytes(), b"\0"].concat();
        if !cubin.windows(sym.len()).any(|w| w == sym.as_slice()) {
            return Err(EngineError::Internal(format!(
                "{src}.cu has no kernel {name}"
            )));
        }
        found.borrow_mut().push(name);
        Ok(std::ptr::null_mut())
    };
    Kernels::resolve(false, &resolve).unwrap_or_else(|e| panic!("{e}"));
    let found = found.into_inner();
    for name in [
        "flash_attn_h_w4_d256",
        "attn_kv_to_f16",
        "gemm_q4_k_g128",
        "gemm_q4_k_gs128",
        "argmax_token",
    ] {
        assert!(found.contains(&name), "{name} not resolved");
    }
    assert!(found.len() > 300, "{} kernels resolved", found.len());
}

#[test]
fn a_wrong_offset_fails_the_kernel_build() {
    let Some(include) = nvrtc() else { return };
    let opts = options("sm_90a", &include);
    let norm = SOURCES
        .iter()
        .find(|s| s.name == "norm")
        .expect("norm source");
    let text = source_text(norm).expect("source");
    let right = "TALLY_OFFSETOF(NormArgs, l2) == 60";
    assert!(text.contains(right), "the check of NormArgs.l2 moved");
    compile_uncached("norm", &text, &opts).expect("the right layout compiles");
    let wrong = text.replace(right, "TALLY_OFFSETOF(NormArgs, l2) == 64");
    let e = compile_uncached("norm", &wrong, &opts).expect_err("a wrong offset must not compile");
    assert!(
        e.to_string()
            .contains("NormArgs.l2: offset differs from args.rs"),
        "{e}"
    );
    // The same for a wrong size, and for a host geometry that differs from the kernel's.
    let right = format!("sizeof(NormArgs) == {}", 152);
    assert!(text.contains(&right), "NormArgs is 152 bytes");
    let e = compile_uncached(
        "norm",
        &text.replace(&right, "sizeof(NormArgs) == 160"),
        &opts,
    )
    .expect_err("a wrong size must not compile");
    assert!(e.to_string().contains("NormArgs: size differs"), "{e}");
    let attn = SOURCES
        .iter()
        .find(|s| s.name == "attention")
        .expect("attention");
    let text = source_text(attn).expect("source");
    let right = "ATTN_SMEM_BYTES(128, ATTN_NW, 0) == 69632";
    assert!(text.contains(right), "attention smem check at d 128");
    let e = compile_uncached(
        "attention",
        &text.replace(right, "ATTN_SMEM_BYTES(128, ATTN_NW, 0) == 69633"),
        &opts,
    )
    .expect_err("a wrong shared-memory size must not compile");
    assert!(
        e.to_string().contains("attention smem of d 128 differs"),
        "{e}"
    );
}

//! Kernel sources embedded in the binary, compiled with NVRTC for the device's architecture at
//! first use and cached on disk as CUBIN (keyed by source, options and compiler version).

use std::ffi::{CStr, CString, c_char, c_int};
use std::path::{Path, PathBuf};

use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys};

use crate::EngineError;

/// One kernel source file and the local headers it may include.
pub struct Source {
    pub name: &'static str,
    pub text: &'static str,
}

/// Headers `#include "..."`d by the sources, inlined before compilation (NVRTC is given no
/// file system access to our sources).
const HEADERS: &[(&str, &str)] = &[
    ("common.cuh", include_str!("kernels/common.cuh")),
    ("quant.cuh", include_str!("kernels/quant.cuh")),
    ("quant_small.cuh", include_str!("kernels/quant_small.cuh")),
    ("quant_load.cuh", include_str!("kernels/quant_load.cuh")),
    ("delta_common.cuh", include_str!("kernels/delta_common.cuh")),
    ("wgmma.cuh", include_str!("kernels/wgmma.cuh")),
    (
        "attention_args.cuh",
        include_str!("kernels/attention_args.cuh"),
    ),
    ("attention_wg.cuh", include_str!("kernels/attention_wg.cuh")),
    ("gemm_wg.cuh", include_str!("kernels/gemm_wg.cuh")),
    (
        "gemm_operands.cuh",
        include_str!("kernels/gemm_operands.cuh"),
    ),
];

/// Headers for nvcc builds only: common.cuh includes it outside NVRTC (`#ifndef TALLY_NVRTC`),
/// so the line is kept as is and NVRTC skips it.
const NVCC_ONLY: &[&str] = &["host_consts.cuh"];

/// Every kernel source of the backend, one per op family (`cuda/ops/<name>.rs` is its host
/// side; `gemm` serves `matmul`, `moe` and `embed`).
pub const SOURCES: &[Source] = &[
    Source {
        name: "norm",
        text: include_str!("kernels/norm.cu"),
    },
    Source {
        name: "rope",
        text: include_str!("kernels/rope.cu"),
    },
    Source {
        name: "kv_store",
        text: include_str!("kernels/kv_store.cu"),
    },
    Source {
        name: "elementwise",
        text: include_str!("kernels/elementwise.cu"),
    },
    Source {
        name: "router",
        text: include_str!("kernels/router.cu"),
    },
    Source {
        name: "moe",
        text: include_str!("kernels/moe.cu"),
    },
    Source {
        name: "conv",
        text: include_str!("kernels/conv.cu"),
    },
    Source {
        name: "delta",
        text: include_str!("kernels/delta.cu"),
    },
    Source {
        name: "attention",
        text: include_str!("kernels/attention.cu"),
    },
    Source {
        name: "gemm",
        text: include_str!("kernels/gemm.cu"),
    },
    Source {
        name: "sample",
        text: include_str!("kernels/sample.cu"),
    },
];

/// Replaces `#include "x"` lines of local headers by their text, each header once.
pub fn expand_includes(src: &str) -> Result<String, EngineError> {
    fn go(src: &str, seen: &mut Vec<&'static str>, out: &mut String) -> Result<(), EngineError> {
        for line in src.lines() {
            let t = line.trim_start();
            if let Some(rest) = t.strip_prefix("#include \"") {
                let name = rest.trim_end().trim_end_matches('"');
                if NVCC_ONLY.contains(&name) {
                    out.push_str(line);
                    out.push('\n');
                    continue;
                }
                let (hname, htext) = HEADERS
                    .iter()
                    .find(|(n, _)| *n == name)
                    .ok_or_else(|| EngineError::Cuda(format!("unknown local header `{name}`")))?;
                if !seen.contains(hname) {
                    seen.push(hname);
                    go(htext, seen, out)?;
                }
                continue;
            }
            if t.starts_with("#pragma once") {
                continue;
            }
            out.push_str(line);
            out.push('\n');
        }
        Ok(())
    }
    let mut out = String::new();
    go(src, &mut Vec::new(), &mut out)?;
    Ok(out)
}

/// Where the CUDA headers (cuda_fp16.h, cuda_bf16.h) are: `$TALLY_CUDA_INCLUDE`, `$CUDA_HOME`,
/// `/usr/local/cuda`, or a toolkit installed from PyPI wheels under `/opt/cu13`.
pub fn cuda_include_dir() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Ok(p) = std::env::var("TALLY_CUDA_INCLUDE") {
        candidates.push(p.into());
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Ok(p) = std::env::var(var) {
            candidates.push(Path::new(&p).join("include"));
        }
    }
    candidates.push("/usr/local/cuda/include".into());
    candidates.push("/opt/cu13/nvidia/cu13/include".into());
    candidates
        .into_iter()
        .find(|p| p.join("cuda_fp16.h").exists())
}

fn cache_dir() -> PathBuf {
    if let Ok(p) = std::env::var("TALLY_CACHE") {
        return p.into();
    }
    let base = std::env::var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|_| std::env::var("HOME").map(|h| Path::new(&h).join(".cache")))
        .unwrap_or_else(|_| std::env::temp_dir());
    base.join("tally").join("cuda")
}

fn nvrtc_version() -> (c_int, c_int) {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: probing for the library has no preconditions (without it there is no version).
    if !unsafe { nvrtc_sys::is_culib_present() } {
        return (0, 0);
    }
    // SAFETY: nvrtcVersion writes two ints through valid pointers.
    unsafe {
        let _ = nvrtc_sys::nvrtcVersion(&mut major, &mut minor);
    }
    (major, minor)
}

/// Compiles `src` for `arch` (e.g. `sm_90a`) to CUBIN, with `defines` (`-DNAME` options of
/// [`super::options::CudaOptions::defines`]) after the usual options, using the disk cache.
pub fn compile(src: &Source, arch: &str, defines: &[String]) -> Result<Vec<u8>, EngineError> {
    let j = job(src, arch, defines, &header_dir()?)?;
    compile_job(src, &j)
}

/// The CUDA headers' directory, or the error that says how to name it.
fn header_dir() -> Result<PathBuf, EngineError> {
    cuda_include_dir().ok_or_else(|| {
        EngineError::Cuda(
            "CUDA headers not found: set TALLY_CUDA_INCLUDE to the directory holding cuda_fp16.h"
                .into(),
        )
    })
}

/// One source's compilation: its text, NVRTC options and cache file (what `compile`,
/// `precompile` and `uncached_sources` all key on).
struct Job {
    text: String,
    opts: Vec<String>,
    path: PathBuf,
}

fn job(src: &Source, arch: &str, defines: &[String], include: &Path) -> Result<Job, EngineError> {
    let text = source_text(src)?;
    let mut opts = options(arch, include);
    opts.extend(defines.iter().filter(|d| mentions(&text, d)).cloned());
    let path = cache_path(src.name, &text, &opts, arch);
    Ok(Job { text, opts, path })
}

/// Whether `text` mentions the macro that option `-DNAME[=VALUE]` defines. A source gets only
/// the defines it reads: a switch for one kernel family then leaves every other source's
/// compilation, and cache entry, as it was (the GEMM source takes minutes to compile).
fn mentions(text: &str, define: &str) -> bool {
    let name = define.trim_start_matches("-D");
    let name = name.split('=').next().unwrap_or(name);
    !name.is_empty() && text.contains(name)
}

impl Job {
    fn is_cached(&self) -> bool {
        std::fs::metadata(&self.path).is_ok_and(|m| m.len() > 0)
    }
}

/// The job's CUBIN from the cache, or compiled and written there.
fn compile_job(src: &Source, j: &Job) -> Result<Vec<u8>, EngineError> {
    if let Ok(bytes) = std::fs::read(&j.path)
        && !bytes.is_empty()
    {
        return Ok(bytes);
    }
    let cubin = compile_uncached(src.name, &j.text, &j.opts)?;
    // The cache is an optimisation: failing to write it is not an error.
    if std::fs::create_dir_all(cache_dir()).is_ok() {
        let tmp = j.path.with_extension("tmp");
        if std::fs::write(&tmp, &cubin).is_ok() {
            let _ = std::fs::rename(&tmp, &j.path);
        }
    }
    Ok(cubin)
}

/// The cache file of one compilation: keyed by the source text, the options (all but the
/// header directory: the headers come with the compiler, whose version is in the key, so a
/// cache filled on a machine with the same NVRTC release, `tally kernels --arch`, serves a GPU
/// host whose headers live elsewhere) and the NVRTC version.
fn cache_path(name: &str, text: &str, opts: &[String], arch: &str) -> PathBuf {
    let keyed: Vec<&String> = opts
        .iter()
        .filter(|o| !o.starts_with("--include-path="))
        .collect();
    let (maj, min) = nvrtc_version();
    let key = tally_model::rng::hash_str(&format!("{text}\n{keyed:?}\nnvrtc {maj}.{min}"));
    cache_dir().join(format!("{name}-{arch}-{key:016x}.cubin"))
}

/// One source's entry in the kernel cache after [`precompile`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct Cached {
    pub source: &'static str,
    pub path: PathBuf,
    /// Whether it was already in the cache.
    pub was_cached: bool,
    pub bytes: usize,
    /// Seconds spent compiling (0 when it was cached).
    pub compile_s: f64,
}

/// Compiles every kernel source for `arch` with `defines` into the disk cache (what the
/// backend does at its first use), without a GPU: NVRTC alone. The first run on a new machine
/// otherwise waits for this (about a minute on a GPU host).
pub fn precompile(arch: &str, defines: &[String]) -> Result<Vec<Cached>, EngineError> {
    // SAFETY: probing for the library has no preconditions.
    if !unsafe { nvrtc_sys::is_culib_present() } {
        return Err(EngineError::Unsupported(
            "NVRTC (libnvrtc.so) was not found: add the CUDA toolkit's lib directory to LD_LIBRARY_PATH"
                .into(),
        ));
    }
    let include = header_dir()?;
    let mut out = Vec::new();
    for src in SOURCES {
        let j = job(src, arch, defines, &include)?;
        let was_cached = j.is_cached();
        let t0 = std::time::Instant::now();
        let bytes = compile_job(src, &j)?.len();
        out.push(Cached {
            source: src.name,
            path: j.path,
            was_cached,
            bytes,
            compile_s: if was_cached {
                0.0
            } else {
                t0.elapsed().as_secs_f64()
            },
        });
    }
    Ok(out)
}

/// The sources whose compilation for `arch` with `defines` is not in the disk cache yet (what the
/// backend's first use will compile), and the cache folder.
pub fn uncached_sources(
    arch: &str,
    defines: &[String],
) -> Result<(Vec<&'static str>, PathBuf), EngineError> {
    let include = cuda_include_dir().unwrap_or_default();
    let mut missing = Vec::new();
    for src in SOURCES {
        if !job(src, arch, defines, &include)?.is_cached() {
            missing.push(src.name);
        }
    }
    Ok((missing, cache_dir()))
}

/// What NVRTC compiles for `src`: its text with the local headers inlined, then the host's checks:
/// every argument struct's layout against its Rust mirror (`args::layout_asserts`) and the
/// launch geometry the host computes against the kernel's own formulas
/// (`ops::geometry_asserts`). A mismatch is a compile error, at the kernels' build.
pub fn source_text(src: &Source) -> Result<String, EngineError> {
    let mut text = expand_includes(src.text)?;
    text.push_str("\n// Checks written by the host (crates/engine/src/cuda/args.rs, ops/).\n");
    // NVRTC provides no <cstddef>: offsetof through its front end's builtin.
    text.push_str("#define TALLY_OFFSETOF(T, f) __INTADDR__(&((T*)0)->f)\n");
    text.push_str(&super::args::layout_asserts(src.name));
    text.push_str(&super::ops::geometry_asserts(src.name));
    Ok(text)
}

/// NVRTC's options: the architecture, the CUDA headers and the host's constants
/// ([`super::consts`]) as `-D` defines.
pub fn options(arch: &str, include: &Path) -> Vec<String> {
    let mut opts = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        format!("--include-path={}", include.display()),
        "-DNDEBUG".to_string(),
    ];
    opts.extend(super::consts::nvrtc_defines());
    opts
}

/// Compiles without the cache; errors carry NVRTC's log.
pub fn compile_uncached(name: &str, text: &str, opts: &[String]) -> Result<Vec<u8>, EngineError> {
    let csrc = CString::new(text)
        .map_err(|_| EngineError::Cuda(format!("kernel source {name} contains a NUL byte")))?;
    let cname = CString::new(format!("{name}.cu"))
        .map_err(|_| EngineError::Cuda("bad kernel name".into()))?;
    let prog = nvrtc::create_program(&csrc, Some(&cname))
        .map_err(|e| EngineError::Cuda(format!("nvrtc create {name}: {e:?}")))?;
    // SAFETY: `prog` is a live program; options are valid C strings owned for the call.
    let compiled = unsafe { nvrtc::compile_program(prog, opts) };
    let result = match compiled {
        Ok(()) => get_cubin(prog),
        Err(e) => {
            // SAFETY: `prog` is live; the log is a NUL-terminated buffer NVRTC filled.
            let log = unsafe { nvrtc::get_program_log(prog) }
                .map(|l| {
                    // SAFETY: get_program_log returns a NUL-terminated C string.
                    unsafe { CStr::from_ptr(l.as_ptr()) }
                        .to_string_lossy()
                        .into_owned()
                })
                .unwrap_or_default();
            Err(EngineError::Cuda(format!(
                "nvrtc failed to compile {name} ({e:?}):\n{log}"
            )))
        }
    };
    // SAFETY: `prog` was created above and is destroyed exactly once.
    unsafe {
        let _ = nvrtc::destroy_program(prog);
    }
    result
}

fn get_cubin(prog: nvrtc_sys::nvrtcProgram) -> Result<Vec<u8>, EngineError> {
    let mut size = 0usize;
    // SAFETY: `prog` compiled successfully; size is written through a valid pointer.
    let r = unsafe { nvrtc_sys::nvrtcGetCUBINSize(prog, &mut size) };
    if r != nvrtc_sys::nvrtcResult::NVRTC_SUCCESS || size == 0 {
        return Err(EngineError::Cuda(format!(
            "nvrtc produced no CUBIN ({r:?}); the architecture must be a real sm_XX"
        )));
    }
    let mut buf = vec![0u8; size];
    // SAFETY: `buf` holds exactly `size` bytes, as NVRTC asked for.
    let r = unsafe { nvrtc_sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char) };
    if r != nvrtc_sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(EngineError::Cuda(format!("nvrtcGetCUBIN: {r:?}")));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache filled on one machine serves another with the same NVRTC release: the header
    /// directory is not part of the key; the source text and every other option are.
    #[test]
    fn the_cache_key_leaves_out_the_header_directory_only() {
        let here = options("sm_90a", Path::new("/opt/cu13/nvidia/cu13/include"));
        let there = options("sm_90a", Path::new("/usr/local/cuda/include"));
        let key = |text: &str, opts: &[String]| cache_path("gemm", text, opts, "sm_90a");
        assert_eq!(key("x", &here), key("x", &there));
        assert_ne!(key("x", &here), key("y", &here));
        let mut other = here.clone();
        other.push("-DTALLY_NO_PREFETCH".into());
        assert_ne!(key("x", &here), key("x", &other));
        assert_ne!(key("x", &here), cache_path("gemm", "x", &here, "sm_89"));
    }

    /// A switch's define reaches the sources that read its macro and no other, so their cache
    /// entries stay valid: the norm switches leave the GEMM source alone, the GEMV block
    /// switches reach it, and the prefetch switch (common.cuh's) reaches every source.
    #[test]
    fn a_source_gets_only_the_defines_it_reads() {
        let inc = Path::new("/usr/local/cuda/include");
        let with = |name: &str, d: &str| {
            let src = SOURCES.iter().find(|s| s.name == name).expect("source");
            job(src, "sm_90a", &[d.to_string()], inc)
                .expect("job")
                .opts
                .contains(&d.to_string())
        };
        for d in ["-DTALLY_ADD_NORM_LATE", "-DADD_NORM_256_MIN_BLOCKS=2"] {
            assert!(with("norm", d), "{d}");
            assert!(!with("gemm", d) && !with("delta", d), "{d}");
        }
        assert!(with("gemm", "-DGEMV_MIN_BLOCKS=3") && !with("norm", "-DGEMV_MIN_BLOCKS=3"));
        assert!(SOURCES.iter().all(|s| with(s.name, "-DTALLY_NO_PREFETCH")));
        assert!(!mentions("int x;", "-D") && mentions("#ifdef A_B\n", "-DA_B=1"));
    }

    #[test]
    fn includes_are_inlined_once() {
        let s = expand_includes("#include \"common.cuh\"\n#include \"common.cuh\"\nint x;\n")
            .expect("expand");
        assert_eq!(s.matches("warp_sum(float v)").count(), 1);
        assert!(s.ends_with("int x;\n"));
        let e = expand_includes("#include \"nope.cuh\"\n").unwrap_err();
        assert!(e.to_string().contains("unknown local header `nope.cuh`"));
    }

    /// The kernels (`name(...)`) of `text` whose body does not begin with `pdl_enter();` (or
    /// `pdl_enter_prefetch(`, which prefetches and then enters), and
    /// how many kernel definitions it holds (mentions in `//` comments are not definitions).
    fn kernels_without_pdl_enter(text: &str) -> (Vec<String>, usize) {
        let (mut missing, mut defs) = (Vec::new(), 0);
        let mut at = 0;
        while let Some(i) = text[at..].find("__global__").map(|i| i + at) {
            at = i + 1;
            let line_start = text[..i].rfind('\n').map_or(0, |j| j + 1);
            if text[line_start..i].contains("//") {
                continue;
            }
            let Some(open) = text[i..].find('{').map(|j| i + j) else {
                continue;
            };
            defs += 1;
            let head = &text[i..open];
            let name = head
                .rfind('(')
                .map(|p| head[..p].split_whitespace().last().unwrap_or("?"))
                .unwrap_or("?");
            let body = text[open + 1..].trim_start_matches([' ', '\t', '\n', '\\']);
            if !body.starts_with("pdl_enter();") && !body.starts_with("pdl_enter_prefetch(") {
                missing.push(name.to_string());
            }
        }
        (missing, defs)
    }

    /// Every kernel is launched with programmatic dependent launch (launch.rs), which is only
    /// safe if it waits for the previous grid before reading its output: each kernel's first
    /// statement must be `pdl_enter()` or `pdl_enter_prefetch(..)` (common.cuh).
    #[test]
    fn every_kernel_enters_through_pdl_enter() {
        let mut total = 0;
        for (name, text) in SOURCES
            .iter()
            .map(|s| (s.name, s.text))
            .chain(HEADERS.iter().copied())
        {
            let (missing, defs) = kernels_without_pdl_enter(text);
            assert!(
                missing.is_empty(),
                "{name}: kernels without pdl_enter(): {missing:?}"
            );
            total += defs;
        }
        // The scan finds the kernels (31 definitions, macros counted once), and it can fail.
        assert!(total >= 30, "only {total} kernel definitions found");
        let (missing, defs) = kernels_without_pdl_enter(
            "// __global__ in a comment {\nextern \"C\" __global__ void k(A a) {\n    int i = 0;\n}\n\
             extern \"C\" __global__ void j(A a) { pdl_enter(); }\n\
             extern \"C\" __global__ void p(A a) { pdl_enter_prefetch(r(a)); }\n\
             extern \"C\" __global__ void q(A a) { l2_prefetch(a.w, 16); pdl_enter(); }\n",
        );
        assert_eq!((missing, defs), (vec!["k".to_string(), "q".to_string()], 4));
    }
}

//! llama.cpp's own quantiser (`llama_model_quantize`, what `llama-quantize` runs) and ggml's
//! dequantisers (`to_float` of each type), as oracles for tally's reading of quantised files:
//! the files people download were written by exactly this code, so a test that quantises with
//! it and reads the result with tally checks tally's layouts, recipes and block decoders against
//! the producer itself rather than against files tally wrote.

use std::ffi::CString;
use std::path::Path;

use llama_cpp_sys_2 as sys;

use crate::PeerError;
use crate::ffi;

/// Quantises the GGUF file `input` into `output` as `llama-quantize input output <ftype>` does
/// without an importance matrix: `ftype` is llama.cpp's file-type number (`llama_ftype`: 15 is
/// Q4_K_M, 30 IQ4_XS, 38 MXFP4_MOE, ...), `threads` the quantiser's threads (at least 1).
pub fn quantize_file(
    input: &Path,
    output: &Path,
    ftype: u32,
    threads: usize,
) -> Result<(), PeerError> {
    ffi::init_once();
    let path = |p: &Path| {
        CString::new(p.to_string_lossy().as_bytes())
            .map_err(|_| PeerError::Param(format!("path {} holds a NUL byte", p.display())))
    };
    let (inp, out) = (path(input)?, path(output)?);
    let nthread = i32::try_from(threads.max(1))
        .map_err(|_| PeerError::Param(format!("{threads} quantiser threads")))?;
    // SAFETY: returns a plain struct of defaults (null pointers for the imatrix, overrides and
    // pruning lists, which llama.cpp reads as "none").
    let mut params = unsafe { sys::llama_model_quantize_default_params() };
    params.nthread = nthread;
    params.ftype = ftype as sys::llama_ftype;
    ffi::clear_log_tail();
    // SAFETY: both paths are NUL-terminated and live across the call; `params` is a valid
    // struct from llama.cpp's defaults with two plain fields set. llama.cpp catches its own
    // exceptions and reports them as a non-zero return.
    let rc = unsafe { sys::llama_model_quantize(inp.as_ptr(), out.as_ptr(), &params) };
    if rc != 0 {
        return Err(PeerError::Engine(format!(
            "llama_model_quantize({} -> {}, ftype {ftype}) returned {rc}: {}",
            input.display(),
            output.display(),
            ffi::log_tail()
        )));
    }
    Ok(())
}

/// Decodes `n` elements of ggml type `type_id` (the GGUF tensor type number) from `data` with
/// ggml's own `to_float`. `data` must hold exactly `n` elements' bytes, `n` whole blocks.
pub fn dequantize(type_id: u32, data: &[u8], n: usize) -> Result<Vec<f32>, PeerError> {
    if type_id >= sys::GGML_TYPE_COUNT {
        return Err(PeerError::Param(format!(
            "ggml type {type_id} does not exist"
        )));
    }
    let t = type_id as sys::ggml_type;
    // SAFETY: `t` is below GGML_TYPE_COUNT, so this indexes ggml's static traits table.
    let traits = unsafe { sys::ggml_get_type_traits(t) };
    // SAFETY: a non-null pointer into that static table, valid for the process.
    let traits = unsafe { traits.as_ref() }
        .ok_or_else(|| PeerError::Engine(format!("ggml has no traits for type {type_id}")))?;
    let to_float = traits.to_float.ok_or_else(|| {
        PeerError::Param(format!(
            "ggml type {} has no to_float (f32 is not decoded)",
            ffi::type_name(t)
        ))
    })?;
    let blck = usize::try_from(traits.blck_size).unwrap_or(0);
    let n64 = i64::try_from(n).map_err(|_| PeerError::Param(format!("{n} elements")))?;
    if blck == 0 || n % blck != 0 {
        return Err(PeerError::Param(format!(
            "{n} elements are not whole {}-element blocks of {}",
            traits.blck_size,
            ffi::type_name(t)
        )));
    }
    let want = ffi::row_bytes(t, n64);
    if data.len() as u64 != want {
        return Err(PeerError::Param(format!(
            "{n} elements of {} take {want} bytes, got {}",
            ffi::type_name(t),
            data.len()
        )));
    }
    let mut out = vec![f32::NAN; n];
    // SAFETY: `data` holds exactly the bytes of `n` elements (checked above), `out` has room for
    // `n` floats, and `to_float` reads and writes only those.
    unsafe { to_float(data.as_ptr().cast(), out.as_mut_ptr(), n64) };
    Ok(out)
}

//! The llama.cpp peer, when this binary was built with it.

use anyhow::Result;
use tally_ledger::measure::Measurement;
use tally_ledger::{MeasureConfig, measure_pair};

#[cfg(not(feature = "llama"))]
use super::InputError;
use super::measure::Common;

/// llama.cpp on the same model file and backend, as a ledger subject.
#[cfg(feature = "llama")]
pub fn open_llama(c: &Common) -> Result<Box<dyn tally_ledger::subject::Subject>> {
    Ok(Box::new(tally_peer_llama::LlamaPeer::open(
        c.model()?,
        &c.backend,
        c.threads,
    )?))
}

#[cfg(not(feature = "llama"))]
pub fn open_llama(_c: &Common) -> Result<Box<dyn tally_ledger::subject::Subject>> {
    Err(InputError(
        "this tally was built without the llama.cpp peer (cargo build --features llama)".into(),
    )
    .into())
}

#[cfg(feature = "llama")]
pub fn measure_with_llama(
    ours: &mut dyn tally_ledger::subject::Subject,
    c: &Common,
    cfg: &MeasureConfig,
) -> Result<(Measurement, Measurement)> {
    let mut peer = tally_peer_llama::LlamaPeer::open(c.model()?, &c.backend, c.threads)?;
    Ok(measure_pair(ours, &mut peer, cfg)?)
}

#[cfg(not(feature = "llama"))]
pub fn measure_with_llama(
    _ours: &mut dyn tally_ledger::subject::Subject,
    _c: &Common,
    _cfg: &MeasureConfig,
) -> Result<(Measurement, Measurement)> {
    let _ = measure_pair;
    Err(InputError(
        "this tally was built without the llama.cpp peer (cargo build --features llama)".into(),
    )
    .into())
}

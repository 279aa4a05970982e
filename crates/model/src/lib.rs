//! tally-model (in progress)

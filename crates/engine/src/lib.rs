//! tally-engine (in progress)

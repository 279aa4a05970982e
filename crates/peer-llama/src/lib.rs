//! tally-peer-llama (in progress)

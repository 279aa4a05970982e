//! The draft from the model's own MTP ("nextn") block: one step of it
//! ([`tally_model::build::build_mtp_plan`]) reads a token and the hidden state of the position
//! before it and scores the token after it.
//!
//! Its KV cache (the block's own, by position) must hold every position of the sequence,
//! paired as the head was trained: position `p` holds (token `t_p`, the trunk's hidden state
//! `h_{p-1}`; zeros at `p = 0`). So each proposal first runs the block over the positions
//! accepted since the last one ("catch-up", with the trunk's hidden states the session
//! recorded), and the catch-up's last row is the first draft step: (the last accepted token,
//! the trunk's hidden state before it) at position `n_past`. Each further draft step feeds the
//! step's own output hidden state and its drafted token at the next position. Those chained
//! rows are provisional: the next catch-up starts after the last accepted position and writes
//! them again with the trunk's hidden states, so a rejection needs no restore of this cache
//! (attention reads only rows up to its own position). That is how llama.cpp's `draft-mtp`
//! driver fills and uses its MTP context (`common/speculative.cpp`).

use std::collections::HashMap;
use std::sync::Arc;

use tally_model::mtp::Mtp;
use tally_model::{Plan, View, build::build_mtp_plan};

use super::Draft;
use crate::EngineError;
use crate::backend::Backend;
use crate::exec::{NoHook, execute};
use crate::sample::argmax;
use crate::session::Session;

/// Drafts with the model's first MTP block, greedily (the argmax of its logits at each step).
pub struct MtpDraft {
    mtp: Mtp,
    plans: HashMap<usize, Arc<Plan>>,
    /// Positions `0..past` of the block's KV cache hold accepted tokens.
    past: usize,
}

impl MtpDraft {
    /// The draft of `model`'s first MTP block; an error naming the file when it has none.
    pub fn new(model: &tally_model::Model) -> Result<MtpDraft, EngineError> {
        let mtp = model.mtp.first().cloned().ok_or_else(|| {
            EngineError::Unsupported(format!(
                "{} has no MTP block (qwen35moe.nextn_predict_layers is 0): no MTP draft",
                model.path.display()
            ))
        })?;
        Ok(MtpDraft {
            mtp,
            plans: HashMap::new(),
            past: 0,
        })
    }

    /// Forgets the sequence: the next proposal fills the block's cache from position 0.
    pub fn reset(&mut self) {
        self.past = 0;
    }

    fn plan<B: Backend>(
        &mut self,
        session: &Session<B>,
        n: usize,
    ) -> Result<Arc<Plan>, EngineError> {
        if let Some(p) = self.plans.get(&n) {
            return Ok(p.clone());
        }
        let p = Arc::new(build_mtp_plan(
            &session.model.config,
            &self.mtp,
            n,
            session.max_ctx(),
        )?);
        self.plans.insert(n, p.clone());
        Ok(p)
    }

    /// Runs one MTP step over `tokens` at positions `pos..`, row i paired with row i of
    /// `hidden` (the hidden state of the position before `tokens[i]`, `hidden`-size values a
    /// row). Returns the logits of the token after the last one (`vocab` values) and the
    /// step's output hidden state of every row. Writes the block's KV cache rows
    /// `pos..pos + tokens.len()`, nothing else of the session's state.
    pub fn step<B: Backend>(
        &mut self,
        session: &mut Session<B>,
        tokens: &[u32],
        pos: usize,
        hidden: &[f32],
    ) -> Result<(Vec<f32>, Vec<f32>), EngineError> {
        let d = session.model.config.hidden;
        if tokens.is_empty() || hidden.len() != tokens.len() * d {
            return Err(EngineError::Internal(format!(
                "an MTP step of {} tokens with {} hidden values",
                tokens.len(),
                hidden.len()
            )));
        }
        if pos + tokens.len() > session.max_ctx() {
            return Err(EngineError::TooLong {
                tokens: pos + tokens.len(),
                max: session.max_ctx(),
                why: "this session's context",
            });
        }
        let plan = self.plan(session, tokens.len())?;
        let (h_in, h_out) = match (plan.hidden_in, plan.hidden) {
            (Some(i), Some(o)) => (i, o),
            _ => {
                return Err(EngineError::Internal(
                    "an MTP plan without hidden views".into(),
                ));
            }
        };
        session.backend.prepare(&plan)?;
        if session.poison {
            session.backend.poison()?;
        }
        session.upload(&plan, tokens)?;
        let p = i32::try_from(pos).map_err(|_| EngineError::Internal(format!("position {pos}")))?;
        let pv = View::all(plan.pos, plan.buf(plan.pos));
        session.backend.write_i32(&plan, pv, &[p])?;
        session.backend.write(&plan, h_in, hidden)?;
        // Node by node: a backend's captured graphs are kept per batch length for the trunk.
        execute(&mut session.backend, &plan, &mut NoHook)?;
        session.backend.barrier()?;
        let logits = session.backend.read(&plan, plan.logits)?;
        let h = session.backend.read(&plan, h_out)?;
        Ok((logits, h))
    }
}

impl<B: Backend> Draft<B> for MtpDraft {
    fn needs_hidden(&self) -> bool {
        true
    }

    fn begin(&mut self) {
        self.reset();
    }

    fn propose(
        &mut self,
        session: &mut Session<B>,
        sequence: &[u32],
        k: usize,
    ) -> Result<Vec<u32>, EngineError> {
        let p = session.n_past();
        let d = session.model.config.hidden;
        if k == 0 {
            return Ok(Vec::new());
        }
        if sequence.len() != p + 1 {
            return Err(EngineError::Internal(format!(
                "an MTP draft after {} tokens of a session at position {p}",
                sequence.len()
            )));
        }
        // Catch-up over positions m..=p: tokens t_m..t_p with the trunk's h_{m-1}..h_{p-1}.
        let m = self.past.min(p);
        let mut h = Vec::with_capacity((p + 1 - m) * d);
        if m == 0 {
            h.resize(d, 0.0);
        }
        let from = m.saturating_sub(1);
        let rows = session.hidden_rows(from, p).ok_or_else(|| {
            EngineError::Internal(format!(
                "the session lacks the hidden states of positions {from}..{p} (hidden output off?)"
            ))
        })?;
        h.extend_from_slice(rows);
        let step = if session.ubatch == 0 {
            p + 1 - m
        } else {
            session.ubatch
        };
        let mut last = None;
        let mut at = m;
        for (toks, hs) in sequence[m..=p].chunks(step).zip(h.chunks(step * d)) {
            last = Some(self.step(session, toks, at, hs)?);
            at += toks.len();
        }
        self.past = p + 1;
        session.forget_hidden_before(p);
        let Some((mut logits, mut hid)) = last else {
            return Ok(Vec::new());
        };
        let mut drafts = Vec::with_capacity(k);
        loop {
            let t = argmax(&logits);
            drafts.push(t);
            if drafts.len() == k || p + drafts.len() >= session.max_ctx() {
                return Ok(drafts);
            }
            let h_last = hid[hid.len() - d..].to_vec();
            (logits, hid) = self.step(session, &[t], p + drafts.len(), &h_last)?;
        }
    }
}

//! `tally chat`: an interactive terminal chat with the file's chat template.
//!
//! The conversation is kept as the tokens the model has seen and written, and each new user
//! turn is appended as tokens: the template renders only the new turn (the difference between a
//! short stand-in conversation with and without it), so earlier turns are never re-rendered or
//! re-tokenized. That keeps every turn an exact extension of the last, so the generator resumes
//! from its live state and prefills only the new turn, even with templates that rewrite history
//! (Qwen's drop earlier turns' reasoning).

use std::io::{BufRead, IsTerminal, Write};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use tally_text::{ChatMessage, ChatRequest, ChatTemplate};

use super::generate::{ModelArgs, Sampling, Text, load, speeds, template};

/// Chat with the model in the terminal: /reset starts over, /exit (or end of input) leaves,
/// Ctrl-C stops the current answer. Speeds are printed after each answer (stderr).
///
/// Example: tally chat --model model.gguf --system "You are terse." --temp 0.7
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    m: ModelArgs,
    /// A system message at the start of the conversation.
    #[arg(long)]
    system: Option<String>,
    /// A Jinja chat template to use instead of the file's.
    #[arg(long)]
    template: Option<PathBuf>,
    /// Turn the model's reasoning block off (Qwen's enable_thinking=false).
    #[arg(long)]
    no_think: bool,
    /// Re-prefill the whole conversation every turn instead of resuming (for measuring).
    #[arg(long)]
    no_resume: bool,
    #[command(flatten)]
    s: Sampling,
}

/// Renders turns for a conversation held as tokens.
struct Turns<'a> {
    template: &'a ChatTemplate,
    text: &'a Text,
    system: Option<String>,
    enable_thinking: Option<bool>,
}

impl Turns<'_> {
    fn render(&self, turns: &[(&str, &str)], generation_prompt: bool) -> Result<String> {
        let mut messages = Vec::new();
        if let Some(s) = &self.system {
            messages.push(ChatMessage::new("system", s));
        }
        messages.extend(turns.iter().map(|(r, c)| ChatMessage::new(r, c)));
        Ok(self.template.render(&ChatRequest {
            messages,
            add_generation_prompt: generation_prompt,
            enable_thinking: self.enable_thinking,
            ..ChatRequest::default()
        })?)
    }

    /// The tokens of the first turn: the whole rendered conversation.
    fn first(&self, user: &str) -> Result<Vec<u32>> {
        Ok(self
            .text
            .0
            .encode(&self.render(&[("user", user)], true)?, true))
    }

    /// The text that follows a finished answer for the next user turn: what the template puts
    /// after an assistant turn's end token, then the new turn with the assistant's header. It
    /// is read off a stand-in conversation (question, answer, the new turn), so earlier turns
    /// are never re-rendered. `None` when the stand-in answer does not appear verbatim (the
    /// caller re-renders everything).
    fn next(&self, user: &str) -> Result<Option<String>> {
        const A: &str = "\u{1}stand-in question\u{1}";
        const B: &str = "\u{1}stand-in answer\u{1}";
        let x = self.render(&[("user", A), ("assistant", B), ("user", user)], true)?;
        let Some(at) = x.find(B) else {
            return Ok(None);
        };
        // After the answer: the end token (the model wrote it, or we append it), then the rest.
        let mut tail = &x[at + B.len()..];
        for &id in self.text.0.eog_ids() {
            let piece = String::from_utf8_lossy(self.text.0.token_piece(id)).to_string();
            if piece.is_empty() {
                continue;
            }
            if let Some(t) = tail.strip_prefix(piece.as_str()) {
                tail = t;
                break;
            }
        }
        Ok(Some(tail.to_string()))
    }
}

pub fn main(a: Args) -> Result<()> {
    let params = a.s.params()?;
    let mut l = load(&a.m)?;
    let tmpl = template(&a.m, a.template.as_deref())?;
    let text = l.text.clone();
    let turns = Turns {
        template: &tmpl,
        text: &text,
        system: a.system.clone(),
        enable_thinking: a.no_think.then_some(false),
    };
    let cancel = Arc::new(AtomicBool::new(false));
    {
        let c = cancel.clone();
        ctrlc::set_handler(move || c.store(true, Ordering::Relaxed))?;
    }
    let end_token = text.0.eot().or(text.0.eos());
    let interactive = std::io::stdin().is_terminal();
    let mut stdout = std::io::stdout();
    eprintln!(
        "tally chat on {} ({}): /reset starts over, /exit leaves, Ctrl-C stops an answer",
        l.device, a.m.backend
    );
    // Everything the model has seen or written, and the conversation as text for re-renders.
    let mut tokens: Vec<u32> = Vec::new();
    let mut history: Vec<(String, String)> = Vec::new();
    let mut lines = std::io::stdin().lock().lines();
    loop {
        if interactive {
            print!("> ");
            stdout.flush()?;
        }
        let Some(line) = lines.next() else { break };
        let line = line?;
        let user = line.trim_end_matches(['\r', '\n']);
        if !interactive {
            println!("> {user}");
        }
        match user.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                tokens.clear();
                history.clear();
                l.generator.reset();
                println!("(conversation reset)");
                continue;
            }
            _ => {}
        }
        let prompt = if tokens.is_empty() {
            turns.first(user)?
        } else if let Some(next) = turns.next(user)? {
            let ended = tokens.last().is_some_and(|&t| text.0.is_eog(t));
            if let (Some(end), false) = (end_token, ended) {
                tokens.push(end);
            }
            let mut p = tokens.clone();
            p.extend(text.0.encode(&next, true));
            p
        } else {
            let mut all: Vec<(&str, &str)> = history
                .iter()
                .map(|(r, c)| (r.as_str(), c.as_str()))
                .collect();
            all.push(("user", user));
            text.0.encode(&turns.render(&all, true)?, true)
        };
        cancel.store(false, Ordering::Relaxed);
        if a.no_resume {
            l.generator.reset();
        }
        let g = l
            .generator
            .generate(&prompt, &params, text.as_ref(), &cancel, &mut |ev| {
                let _ = stdout.write_all(ev.text.as_bytes());
                let _ = stdout.flush();
                ControlFlow::Continue(())
            });
        let g = match g {
            Ok(g) => g,
            Err(e) => {
                println!();
                eprintln!("error: {e}");
                continue;
            }
        };
        println!();
        eprintln!("[{}]", speeds(&g));
        tokens = prompt;
        tokens.extend(&g.tokens);
        history.push(("user".into(), user.to_string()));
        history.push(("assistant".into(), g.text.clone()));
    }
    Ok(())
}

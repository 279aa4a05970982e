//! Chat templates against transformers' `apply_chat_template` (renders committed in
//! tests/data/templates/renders.json by tools/text/make_template_renders.py) on the real
//! Qwen3.5 and Qwen3 templates llama.cpp ships.

mod common;

use common::data;
use tally_gguf::GgufFile;
use tally_text::{ChatMessage, ChatRequest, ChatTemplate, TextError};

fn renders() -> Vec<serde_json::Value> {
    let s = std::fs::read_to_string(data("templates/renders.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&s).unwrap();
    v["cases"].as_array().unwrap().clone()
}

fn template(name: &str) -> ChatTemplate {
    let src = std::fs::read_to_string(data(&format!("templates/{name}"))).unwrap();
    ChatTemplate::new(&src).unwrap()
}

#[test]
fn renders_match_transformers() {
    let cases = renders();
    assert!(cases.len() >= 30);
    let mut failures = Vec::new();
    for c in &cases {
        let name = c["template"].as_str().unwrap();
        let case = c["case"].as_str().unwrap();
        let req: ChatRequest = serde_json::from_value(c["request"].clone()).unwrap();
        let got = template(name).render(&req);
        match (c.get("expected").and_then(|e| e.as_str()), got) {
            (Some(want), Ok(got)) if got == want => {}
            (Some(want), Ok(got)) => {
                failures.push(format!("{name} {case}:\n--- want\n{want}\n--- got\n{got}"))
            }
            (Some(_), Err(e)) => failures.push(format!("{name} {case}: error {e}")),
            (None, Ok(got)) if case == "error_no_messages" => {
                // transformers refuses an empty conversation before rendering; the Qwen3.5
                // template raises itself, Qwen3's renders nothing but the generation prompt.
                assert!(name.starts_with("Qwen-Qwen3"), "{name}: {got:?}");
            }
            (None, Ok(got)) => {
                failures.push(format!("{name} {case}: rendered {got:?}, want error"))
            }
            (None, Err(e)) => {
                let want = c["error"].as_str().unwrap();
                assert!(matches!(e, TextError::TemplateRender(_)));
                // The template's own raise_exception messages come through; errors of the
                // engines themselves (a list has no .startswith) are worded differently.
                if case == "error_system_late" {
                    assert!(e.to_string().contains(want), "{name} {case}: {e} vs {want}");
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn string_arguments_are_passed_as_objects() {
    // OpenAI clients send tool-call arguments as a JSON string.
    let c = renders()
        .into_iter()
        .find(|c| c["template"] == "Qwen3.5-4B.jinja" && c["case"] == "tool_calls")
        .unwrap();
    let mut req: ChatRequest = serde_json::from_value(c["request"].clone()).unwrap();
    for m in &mut req.messages {
        for call in m.tool_calls.iter_mut().flatten() {
            let args = &mut call["function"]["arguments"];
            *args = serde_json::Value::String(args.to_string());
        }
    }
    let got = template("Qwen3.5-4B.jinja").render(&req).unwrap();
    assert_eq!(got, c["expected"].as_str().unwrap());
}

#[test]
fn thinking_switch_changes_the_generation_prompt() {
    let t = template("Qwen3.5-4B.jinja");
    let mut req = ChatRequest {
        messages: vec![ChatMessage::new("user", "hi")],
        add_generation_prompt: true,
        ..ChatRequest::default()
    };
    assert!(
        t.render(&req)
            .unwrap()
            .ends_with("<|im_start|>assistant\n<think>\n")
    );
    req.enable_thinking = Some(false);
    assert!(t.render(&req).unwrap().ends_with("<think>\n\n</think>\n\n"));
}

#[test]
fn a_file_without_a_template_names_the_key() {
    let f = GgufFile::open(&data("tiny.gguf")).unwrap();
    let e = ChatTemplate::from_gguf(&f).unwrap_err();
    assert!(matches!(e, TextError::NoTemplate { .. }));
    assert!(e.to_string().contains("tokenizer.chat_template"), "{e}");
    let e = ChatTemplate::new("{% if %}").unwrap_err();
    assert!(matches!(e, TextError::TemplateSyntax(_)), "{e}");
}

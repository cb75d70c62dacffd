//! `decode.svg` and `prefill.svg`: well-formed XML (checked by a small strict reader below, as
//! the crate has no XML dependency), one grid cell per decode cell and one row per prefill row,
//! and labels that cannot break the markup.

mod report_common;

use llmspeed::matrix::status::CellStatus;
use llmspeed::report::{svg, MatrixReport};

/// An element as the reader saw it: name and attributes (values unescaped are not needed).
#[derive(Debug)]
struct Element {
    name: String,
    attrs: Vec<(String, String)>,
}

fn is_name(s: &str) -> bool {
    let mut it = s.chars();
    it.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && it.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'))
}

/// Text and attribute values: no raw `<`, and every `&` starts a known entity.
fn check_text(t: &str) -> Result<(), String> {
    if t.contains('<') {
        return Err(format!("raw '<' in {t:?}"));
    }
    let mut rest = t;
    while let Some(i) = rest.find('&') {
        rest = &rest[i..];
        let ok = ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
            .iter()
            .any(|e| rest.starts_with(e));
        if !ok {
            return Err(format!("bare '&' in {t:?}"));
        }
        rest = &rest[1..];
    }
    Ok(())
}

fn parse_attrs(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut attrs = Vec::new();
    let mut rest = s.trim_start();
    while !rest.is_empty() {
        let eq = rest
            .find('=')
            .ok_or(format!("attribute without value: {rest:?}"))?;
        let name = rest[..eq].trim();
        if !is_name(name) {
            return Err(format!("bad attribute name {name:?}"));
        }
        let after = &rest[eq + 1..];
        let q = after.chars().next().ok_or("missing value")?;
        if q != '"' && q != '\'' {
            return Err(format!("unquoted value of {name}"));
        }
        let end = after[1..]
            .find(q)
            .ok_or(format!("unterminated value of {name}"))?;
        let value = &after[1..1 + end];
        check_text(value)?;
        if attrs.iter().any(|(n, _)| n == name) {
            return Err(format!("duplicate attribute {name}"));
        }
        attrs.push((name.to_string(), value.to_string()));
        let tail = &after[2 + end..];
        if !tail.is_empty() && !tail.starts_with(char::is_whitespace) {
            return Err(format!("no space after attribute {name}"));
        }
        rest = tail.trim_start();
    }
    Ok(attrs)
}

/// Every element, in document order, of a well-formed document with one root.
fn parse(doc: &str) -> Result<Vec<Element>, String> {
    let mut out = Vec::new();
    let mut stack: Vec<String> = Vec::new();
    let mut roots = 0;
    let mut rest = doc;
    loop {
        let Some(lt) = rest.find('<') else {
            check_text(rest)?;
            if !rest.trim().is_empty() {
                return Err("text after the root".into());
            }
            break;
        };
        let text = &rest[..lt];
        check_text(text)?;
        if stack.is_empty() && !text.trim().is_empty() {
            return Err(format!("text outside the root: {text:?}"));
        }
        let gt = rest[lt..].find('>').ok_or("unterminated tag")? + lt;
        let tag = &rest[lt + 1..gt];
        rest = &rest[gt + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some(open) if open == name.trim() => {}
                other => return Err(format!("</{name}> closes {other:?}")),
            }
            continue;
        }
        let (body, empty) = match tag.strip_suffix('/') {
            Some(b) => (b, true),
            None => (tag, false),
        };
        let name_end = body.find(char::is_whitespace).unwrap_or(body.len());
        let name = &body[..name_end];
        if !is_name(name) {
            return Err(format!("bad element name {name:?}"));
        }
        if stack.is_empty() {
            roots += 1;
            if roots > 1 {
                return Err("more than one root".into());
            }
        }
        out.push(Element {
            name: name.to_string(),
            attrs: parse_attrs(&body[name_end..])?,
        });
        if !empty {
            stack.push(name.to_string());
        }
    }
    if !stack.is_empty() {
        return Err(format!("unclosed {stack:?}"));
    }
    if roots != 1 {
        return Err("no root".into());
    }
    Ok(out)
}

fn attr<'a>(e: &'a Element, name: &str) -> Option<&'a str> {
    e.attrs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn render(f: fn(&mut Vec<u8>, &MatrixReport) -> std::io::Result<()>, r: &MatrixReport) -> String {
    let mut out = Vec::new();
    f(&mut out, r).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn the_reader_rejects_broken_documents() {
    assert!(parse("<svg><g></g></svg>").is_ok());
    for bad in [
        "<svg><g></svg>",
        "<svg>a < b</svg>",
        "<svg>AT&T</svg>",
        "<svg x=1/>",
        "<svg/><svg/>",
        "<svg x=\"1\" x=\"2\"/>",
        "<svg>",
    ] {
        assert!(parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn decode_svg_has_one_cell_per_grid_cell() {
    let r = report_common::report();
    let doc = render(svg::write_decode, &r);
    let elements = parse(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"));
    assert_eq!(elements[0].name, "svg");
    let cells: Vec<&Element> = elements
        .iter()
        .filter(|e| e.name == "g" && attr(e, "data-concurrency").is_some())
        .collect();
    assert_eq!(cells.len(), r.decode.len());
    for c in &r.decode {
        let found = cells.iter().filter(|e| {
            attr(e, "data-context") == Some(c.context_label.as_str())
                && attr(e, "data-concurrency") == Some(c.concurrency.to_string().as_str())
                && attr(e, "data-status") == Some(c.status.as_str())
        });
        assert_eq!(found.count(), 1, "{} x {}", c.context_label, c.concurrency);
    }
    let rects = elements
        .iter()
        .filter(|e| e.name == "rect" && attr(e, "class") == Some("cell"))
        .count();
    assert_eq!(rects, r.decode.len());
    // A Valid cell is shaded by tok/s; the best one gets the darkest shade.
    assert!(r.decode.iter().any(|c| c.status == CellStatus::Valid));
    assert!(doc.contains("fill=\"#1b6e3a\""), "{doc}");
}

#[test]
fn prefill_svg_has_one_row_per_context_with_two_bars() {
    let r = report_common::report();
    let doc = render(svg::write_prefill, &r);
    let elements = parse(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"));
    let rows = elements
        .iter()
        .filter(|e| e.name == "g" && attr(e, "data-context").is_some())
        .count();
    assert_eq!(rows, r.prefill.len());
    let bars = elements
        .iter()
        .filter(|e| e.name == "rect" && attr(e, "class") == Some("bar"))
        .count();
    assert_eq!(bars, 2 * r.prefill.len());
}

#[test]
fn hostile_labels_stay_text() {
    let mut r = report_common::report();
    r.metadata.model.id = "a<b>&\"c\"".into();
    for c in &mut r.decode {
        c.context_label = format!("{}<&>", c.context_label);
    }
    r.prefill[0].context_label = "</svg>".into();
    for doc in [
        render(svg::write_decode, &r),
        render(svg::write_prefill, &r),
    ] {
        parse(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"));
    }
}

#[test]
fn an_empty_report_is_still_a_picture() {
    let mut r = report_common::report();
    r.decode.clear();
    r.prefill.clear();
    for doc in [
        render(svg::write_decode, &r),
        render(svg::write_prefill, &r),
    ] {
        let e = parse(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"));
        assert_eq!(e[0].name, "svg");
    }
}

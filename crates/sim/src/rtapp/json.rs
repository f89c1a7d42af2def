//! The JSON that rt-app reads: json-c's lenient grammar (rt-app parses with
//! `json_object_from_file`, non-strict mode) plus the two freedoms of rt-app's own
//! `workgen` front end, kept as a tree that remembers key order and positions.
//!
//! Accepted beyond RFC 8259, as json-c accepts it: `/* … */` and `// …` comments wherever
//! white space may be; a trailing comma before `}` or `]`; single-quoted strings;
//! `true`/`false`/`null` in any letter case; `NaN` and `Infinity`. From workgen
//! (tutorial.txt, "rt-app and workgen"): a key repeated in one object is kept, in file
//! order (workgen renames it `run1`, `run2`, … before rt-app sees it — json-c alone would
//! keep the last value only), and a bare member name with no value (`"suspend",`), which
//! workgen completes with the thread's name.
//!
//! Every value and key keeps its 1-based line and column (in characters), so that the
//! rt-app reader can name the place of any error. Invariants: objects keep every member in
//! file order, duplicates included; a bare member has `value == None`.

use std::fmt;

/// A 1-based line and column.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// A JSON value and where it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub at: Pos,
    pub kind: Kind,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Arr(Vec<Value>),
    Obj(Vec<Member>),
}

/// One member of an object: its key (and where the key starts) and its value, None for
/// a bare name (`"suspend",`).
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    pub key: String,
    pub at: Pos,
    pub value: Option<Value>,
}

impl Value {
    /// What the value is, for messages ("an integer", "an object").
    pub fn describe(&self) -> &'static str {
        match self.kind {
            Kind::Null => "null",
            Kind::Bool(_) => "a boolean",
            Kind::Int(_) => "an integer",
            Kind::Float(_) => "a number with a fraction",
            Kind::Str(_) => "a string",
            Kind::Arr(_) => "an array",
            Kind::Obj(_) => "an object",
        }
    }
}

/// A syntax error at a position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntaxError {
    pub at: Pos,
    pub msg: String,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.msg)
    }
}

/// Nesting deeper than this is refused (a bound on recursion, not on real files).
const MAX_DEPTH: usize = 64;

/// Parses one JSON document in json-c's lenient grammar (module docs).
pub fn parse(text: &str) -> Result<Value, SyntaxError> {
    let mut p = Parser { chars: text.chars().collect(), i: 0, line: 1, col: 1 };
    let v = p.value(0)?;
    p.blank()?;
    if p.i < p.chars.len() {
        return Err(p.err(format!("unexpected `{}` after the end of the document", p.chars[p.i])));
    }
    Ok(v)
}

struct Parser {
    chars: Vec<char>,
    i: usize,
    line: usize,
    col: usize,
}

impl Parser {
    fn pos(&self) -> Pos {
        Pos { line: self.line, col: self.col }
    }

    fn err(&self, msg: impl Into<String>) -> SyntaxError {
        SyntaxError { at: self.pos(), msg: msg.into() }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.i += 1;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    /// Skips white space and comments.
    fn blank(&mut self) -> Result<(), SyntaxError> {
        loop {
            match self.peek() {
                Some(c) if c.is_whitespace() => {
                    self.bump();
                }
                Some('/') => {
                    let start = self.pos();
                    match self.chars.get(self.i + 1) {
                        Some('/') => {
                            while self.peek().is_some_and(|c| c != '\n') {
                                self.bump();
                            }
                        }
                        Some('*') => {
                            self.bump();
                            self.bump();
                            loop {
                                match self.bump() {
                                    None => return Err(SyntaxError { at: start, msg: "a /* comment is never closed".into() }),
                                    Some('*') if self.peek() == Some('/') => {
                                        self.bump();
                                        break;
                                    }
                                    Some(_) => {}
                                }
                            }
                        }
                        _ => return Err(self.err("unexpected `/` (comments are /* … */ or // …)")),
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, SyntaxError> {
        if depth > MAX_DEPTH {
            return Err(self.err(format!("nested deeper than {MAX_DEPTH} levels")));
        }
        self.blank()?;
        let at = self.pos();
        let kind = match self.peek() {
            None => return Err(self.err("unexpected end of the file: expected a value")),
            Some('{') => self.object(depth)?,
            Some('[') => self.array(depth)?,
            Some(q @ ('"' | '\'')) => Kind::Str(self.string(q)?),
            Some(c) if c == '-' || c == '+' || c.is_ascii_digit() => self.number()?,
            Some(c) if c.is_ascii_alphabetic() => self.word()?,
            Some(c) => return Err(self.err(format!("unexpected `{c}`: expected a value"))),
        };
        Ok(Value { at, kind })
    }

    fn object(&mut self, depth: usize) -> Result<Kind, SyntaxError> {
        let open = self.pos();
        self.bump();
        let mut members = Vec::new();
        loop {
            self.blank()?;
            match self.peek() {
                Some('}') => {
                    self.bump();
                    return Ok(Kind::Obj(members));
                }
                Some(q @ ('"' | '\'')) => {
                    let at = self.pos();
                    let key = self.string(q)?;
                    self.blank()?;
                    let value = match self.peek() {
                        Some(':') => {
                            self.bump();
                            Some(self.value(depth + 1)?)
                        }
                        // workgen's bare name ("suspend",)
                        Some(',' | '}') => None,
                        Some(c) => return Err(self.err(format!("unexpected `{c}` after the key \"{key}\": expected `:`"))),
                        None => return Err(self.err("unexpected end of the file inside an object")),
                    };
                    members.push(Member { key, at, value });
                    self.blank()?;
                    match self.peek() {
                        Some(',') => {
                            self.bump();
                        }
                        Some('}') => {}
                        Some(c) => return Err(self.err(format!("unexpected `{c}`: expected `,` or `}}`"))),
                        None => return Err(SyntaxError { at: open, msg: "this object is never closed".into() }),
                    }
                }
                Some(c) => return Err(self.err(format!("unexpected `{c}`: expected a key in double quotes or `}}`"))),
                None => return Err(SyntaxError { at: open, msg: "this object is never closed".into() }),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Kind, SyntaxError> {
        let open = self.pos();
        self.bump();
        let mut items = Vec::new();
        loop {
            self.blank()?;
            match self.peek() {
                Some(']') => {
                    self.bump();
                    return Ok(Kind::Arr(items));
                }
                None => return Err(SyntaxError { at: open, msg: "this array is never closed".into() }),
                _ => {}
            }
            items.push(self.value(depth + 1)?);
            self.blank()?;
            match self.peek() {
                Some(',') => {
                    self.bump();
                }
                Some(']') => {}
                Some(c) => return Err(self.err(format!("unexpected `{c}`: expected `,` or `]`"))),
                None => return Err(SyntaxError { at: open, msg: "this array is never closed".into() }),
            }
        }
    }

    fn string(&mut self, quote: char) -> Result<String, SyntaxError> {
        let start = self.pos();
        self.bump();
        let mut s = String::new();
        loop {
            let Some(c) = self.bump() else {
                return Err(SyntaxError { at: start, msg: "this string is never closed".into() });
            };
            match c {
                c if c == quote => return Ok(s),
                '\\' => {
                    let e = self.bump().ok_or_else(|| self.err("unexpected end of the file in an escape"))?;
                    s.push(match e {
                        '"' | '\\' | '/' | '\'' => e,
                        'b' => '\u{8}',
                        'f' => '\u{c}',
                        'n' => '\n',
                        'r' => '\r',
                        't' => '\t',
                        'u' => self.unicode()?,
                        other => return Err(self.err(format!("unknown escape `\\{other}`"))),
                    });
                }
                '\n' => return Err(SyntaxError { at: start, msg: "a string cannot span lines".into() }),
                c => s.push(c),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, SyntaxError> {
        let mut v = 0;
        for _ in 0..4 {
            let c = self.bump().ok_or_else(|| self.err("unexpected end of the file in \\u escape"))?;
            v = v * 16 + c.to_digit(16).ok_or_else(|| self.err(format!("`{c}` is not a hex digit (\\uXXXX)")))?;
        }
        Ok(v)
    }

    fn unicode(&mut self) -> Result<char, SyntaxError> {
        let hi = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&hi) && self.peek() == Some('\\') && self.chars.get(self.i + 1) == Some(&'u') {
            self.bump();
            self.bump();
            let lo = self.hex4()?;
            0x10000 + ((hi - 0xD800) << 10) + (lo.wrapping_sub(0xDC00) & 0x3FF)
        } else {
            hi
        };
        Ok(char::from_u32(code).unwrap_or('\u{FFFD}'))
    }

    fn number(&mut self) -> Result<Kind, SyntaxError> {
        let start = self.pos();
        let from = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '+' | '.')) {
            self.bump();
        }
        let text: String = self.chars[from..self.i].iter().collect();
        let digits = text.trim_start_matches(['-', '+']);
        if digits.eq_ignore_ascii_case("infinity") {
            return Ok(Kind::Float(if text.starts_with('-') { f64::NEG_INFINITY } else { f64::INFINITY }));
        }
        if !text.contains(['.', 'e', 'E']) {
            if let Ok(i) = text.parse::<i64>() {
                return Ok(Kind::Int(i));
            }
        }
        match text.parse::<f64>() {
            Ok(f) if text.contains(['.', 'e', 'E']) => Ok(Kind::Float(f)),
            Ok(_) => Err(SyntaxError { at: start, msg: format!("the integer {text} is too large (json-c reads 64-bit integers)") }),
            Err(_) => Err(SyntaxError { at: start, msg: format!("`{text}` is not a number") }),
        }
    }

    fn word(&mut self) -> Result<Kind, SyntaxError> {
        let start = self.pos();
        let from = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            self.bump();
        }
        let w: String = self.chars[from..self.i].iter().collect();
        match w.to_ascii_lowercase().as_str() {
            "true" => Ok(Kind::Bool(true)),
            "false" => Ok(Kind::Bool(false)),
            "null" => Ok(Kind::Null),
            "nan" => Ok(Kind::Float(f64::NAN)),
            "infinity" => Ok(Kind::Float(f64::INFINITY)),
            _ => Err(SyntaxError { at: start, msg: format!("unexpected word `{w}`: expected a value (strings need quotes)") }),
        }
    }
}

/// The document written back as strict JSON that rt-app itself reads, as workgen would
/// hand it over: a key repeated in one object becomes `KEY1`, `KEY2`, … (the first
/// unused), and a bare name gets the string `bare` (workgen's thread name for a bare
/// `"suspend"`), given by the caller for each bare member's position.
pub fn to_strict(v: &Value, bare: &dyn Fn(Pos) -> String) -> String {
    let mut out = String::new();
    write_value(v, bare, 0, &mut out);
    out.push('\n');
    out
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).expect("a string always serialises")
}

fn write_value(v: &Value, bare: &dyn Fn(Pos) -> String, indent: usize, out: &mut String) {
    let pad = |n: usize| "\t".repeat(n);
    match &v.kind {
        Kind::Null => out.push_str("null"),
        Kind::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Kind::Int(i) => out.push_str(&i.to_string()),
        Kind::Float(f) if f.is_finite() => out.push_str(&format!("{f:?}")),
        Kind::Float(_) => out.push_str("null"),
        Kind::Str(s) => out.push_str(&quote(s)),
        Kind::Arr(items) => {
            out.push('[');
            for (k, x) in items.iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                write_value(x, bare, indent, out);
            }
            out.push(']');
        }
        Kind::Obj(members) => {
            out.push_str("{\n");
            let mut used: Vec<String> = Vec::new();
            for (k, m) in members.iter().enumerate() {
                let mut key = m.key.clone();
                if used.contains(&key) {
                    key = (1..)
                        .map(|n| format!("{}{n}", m.key))
                        .find(|c| !used.contains(c) && !members.iter().any(|o| o.key == *c))
                        .expect("a free name");
                }
                used.push(key.clone());
                out.push_str(&pad(indent + 1));
                out.push_str(&quote(&key));
                out.push_str(" : ");
                match &m.value {
                    Some(x) => write_value(x, bare, indent + 1, out),
                    None => out.push_str(&quote(&bare(m.at))),
                }
                out.push_str(if k + 1 < members.len() { ",\n" } else { "\n" });
            }
            out.push_str(&pad(indent));
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(v: &Value) -> Vec<(&str, Pos)> {
        match &v.kind {
            Kind::Obj(m) => m.iter().map(|m| (m.key.as_str(), m.at)).collect(),
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn json_c_freedoms_and_workgen_ones() {
        let text = "{\n  /* a comment */ \"a\" : 1, // another\n  \"b\" : [1, 2,],\n  \"a\" : 'x',\n  \"suspend\",\n  \"c\" : TRUE, \"d\": -2.5e3,\n}\n";
        let v = parse(text).unwrap();
        let k = keys(&v);
        assert_eq!(
            k,
            [
                ("a", Pos { line: 2, col: 19 }),
                ("b", Pos { line: 3, col: 3 }),
                ("a", Pos { line: 4, col: 3 }),
                ("suspend", Pos { line: 5, col: 3 }),
                ("c", Pos { line: 6, col: 3 }),
                ("d", Pos { line: 6, col: 15 })
            ]
        );
        let Kind::Obj(m) = &v.kind else { unreachable!() };
        assert_eq!(m[0].value.as_ref().unwrap().kind, Kind::Int(1));
        assert_eq!(
            m[1].value.as_ref().unwrap().kind,
            Kind::Arr(vec![
                Value { at: Pos { line: 3, col: 10 }, kind: Kind::Int(1) },
                Value { at: Pos { line: 3, col: 13 }, kind: Kind::Int(2) }
            ])
        );
        assert_eq!(m[2].value.as_ref().unwrap().kind, Kind::Str("x".into()));
        assert_eq!(m[3].value, None);
        assert_eq!(m[4].value.as_ref().unwrap().kind, Kind::Bool(true));
        assert_eq!(m[5].value.as_ref().unwrap().kind, Kind::Float(-2500.0));
    }

    #[test]
    fn errors_name_the_place() {
        let cases = [
            ("{ \"a\" : 1 \"b\" : 2 }", "1:11: unexpected `\"`: expected `,` or `}`"),
            ("{ \"a\" : 1, ", "1:1: this object is never closed"),
            ("{\n\"a\" : /* open", "2:7: a /* comment is never closed"),
            ("{ \"a\" : tru }", "1:9: unexpected word `tru`"),
            ("{ a : 1 }", "1:3: unexpected `a`: expected a key in double quotes"),
            ("{ \"a\" : 1 } x", "1:13: unexpected `x` after the end of the document"),
            ("{ \"a\" : 99999999999999999999 }", "the integer 99999999999999999999 is too large"),
            ("{ \"a\" : \"x\n\" }", "1:9: a string cannot span lines"),
            ("", "1:1: unexpected end of the file"),
        ];
        for (text, want) in cases {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.starts_with(want) || e.contains(want), "{text:?}: got {e:?}, wanted {want:?}");
        }
        let deep = "[".repeat(100) + &"]".repeat(100);
        assert!(parse(&deep).unwrap_err().msg.contains("nested deeper"));
    }

    #[test]
    fn strict_output_numbers_repeats_and_fills_bare_names() {
        let v = parse("{ \"t\": { \"run\": 1, \"run\": 2, \"run1\": 3, \"suspend\", } }").unwrap();
        let s = to_strict(&v, &|_| "t".to_string());
        let back: serde_json::Value = serde_json::from_str(&s).unwrap();
        let t = back["t"].as_object().unwrap();
        let keys: Vec<&str> = t.keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 4, "{s}");
        assert_eq!(t["run"], 1);
        assert_eq!(t["run2"], 2, "run1 is taken by a later key: {s}");
        assert_eq!(t["run1"], 3);
        assert_eq!(t["suspend"], "t");
    }
}

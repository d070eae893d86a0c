//! Threshold expressions such as `"lease_ms + 1500"` or `"2 * renew_ms"`: numbers, named
//! scenario values, `+ - * /` and parentheses. Evaluated once, when the scenario loads.

use std::collections::BTreeMap;

/// Evaluates `text` with `vars`; the error names the offending token.
pub fn eval(text: &str, vars: &BTreeMap<&str, f64>) -> Result<f64, String> {
    let tokens = tokenize(text)?;
    let mut parser = Parser {
        tokens: &tokens,
        pos: 0,
        vars,
    };
    let value = parser.sum()?;
    match parser.tokens.get(parser.pos) {
        None => Ok(value),
        Some(t) => Err(format!("unexpected {t:?} in expression {text:?}")),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Num(f64),
    Ident(String),
    Op(char),
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || c == '.' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_digit() || chars[i] == '.' || chars[i] == '_')
            {
                i += 1;
            }
            let s: String = chars[start..i].iter().filter(|c| **c != '_').collect();
            tokens
                .push(Token::Num(s.parse().map_err(|_| {
                    format!("bad number {s:?} in expression {text:?}")
                })?));
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token::Ident(chars[start..i].iter().collect()));
        } else if "+-*/()".contains(c) {
            tokens.push(Token::Op(c));
            i += 1;
        } else {
            return Err(format!("unexpected character {c:?} in expression {text:?}"));
        }
    }
    Ok(tokens)
}

struct Parser<'a> {
    tokens: &'a [Token],
    pos: usize,
    vars: &'a BTreeMap<&'a str, f64>,
}

impl Parser<'_> {
    fn sum(&mut self) -> Result<f64, String> {
        let mut value = self.product()?;
        while let Some(Token::Op(op @ ('+' | '-'))) = self.tokens.get(self.pos) {
            self.pos += 1;
            let rhs = self.product()?;
            value = if *op == '+' { value + rhs } else { value - rhs };
        }
        Ok(value)
    }

    fn product(&mut self) -> Result<f64, String> {
        let mut value = self.atom()?;
        while let Some(Token::Op(op @ ('*' | '/'))) = self.tokens.get(self.pos) {
            self.pos += 1;
            let rhs = self.atom()?;
            value = if *op == '*' { value * rhs } else { value / rhs };
        }
        Ok(value)
    }

    fn atom(&mut self) -> Result<f64, String> {
        let token = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        match token {
            Some(Token::Num(n)) => Ok(n),
            Some(Token::Ident(name)) => self.vars.get(name.as_str()).copied().ok_or_else(|| {
                let known: Vec<&str> = self.vars.keys().copied().collect();
                format!("unknown name {name:?} (known: {})", known.join(", "))
            }),
            Some(Token::Op('-')) => Ok(-self.atom()?),
            Some(Token::Op('(')) => {
                let value = self.sum()?;
                match self.tokens.get(self.pos) {
                    Some(Token::Op(')')) => {
                        self.pos += 1;
                        Ok(value)
                    }
                    _ => Err("missing ')'".to_string()),
                }
            }
            Some(t) => Err(format!("unexpected {t:?}")),
            None => Err("expression ends too early".to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> BTreeMap<&'static str, f64> {
        BTreeMap::from([("lease_ms", 3000.0), ("renew_ms", 1000.0)])
    }

    #[test]
    fn evaluates_arithmetic_over_names() {
        assert_eq!(eval("lease_ms + 1500", &vars()), Ok(4500.0));
        assert_eq!(eval("2 * (lease_ms - renew_ms) / 4", &vars()), Ok(1000.0));
        assert_eq!(eval("-1 + 1_000", &vars()), Ok(999.0));
    }

    #[test]
    fn rejects_unknown_names_and_bad_syntax() {
        assert!(eval("lease + 1", &vars())
            .unwrap_err()
            .contains("unknown name \"lease\""));
        assert!(eval("1 +", &vars()).is_err());
        assert!(eval("(1", &vars()).is_err());
        assert!(eval("1 2", &vars()).is_err());
        assert!(eval("1 % 2", &vars()).is_err());
    }
}

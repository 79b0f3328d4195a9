//! The demo agent's `calculator` tool: arithmetic on decimal numbers with + - * / % ^ and parentheses.

/// Longest expression the calculator takes; it is a demo tool, and this bounds the recursion depth too.
pub const MAX_EXPR_BYTES: usize = 1024;
/// Deepest nesting of parentheses and unary minus, so a hostile expression cannot exhaust the stack.
const MAX_DEPTH: usize = 64;

/// Why an expression could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CalcError {
    /// The expression is longer than [`MAX_EXPR_BYTES`] or nested deeper than the calculator allows.
    TooLong,
    /// Something other than a number, operator or parenthesis was found, at this byte offset.
    Unexpected(usize),
    /// The expression ended early.
    UnexpectedEnd,
    /// Division or remainder by zero.
    DivisionByZero,
    /// The result is not a finite number.
    NotFinite,
}

impl std::fmt::Display for CalcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CalcError::TooLong => write!(f, "expression too long or too deeply nested"),
            CalcError::Unexpected(i) => write!(f, "unexpected character at offset {i}"),
            CalcError::UnexpectedEnd => write!(f, "expression ends early"),
            CalcError::DivisionByZero => write!(f, "division by zero"),
            CalcError::NotFinite => write!(f, "result is not a finite number"),
        }
    }
}

/// Evaluates an arithmetic expression.
pub fn evaluate(expr: &str) -> Result<f64, CalcError> {
    if expr.len() > MAX_EXPR_BYTES {
        return Err(CalcError::TooLong);
    }
    let mut p = Parser {
        s: expr.as_bytes(),
        i: 0,
        depth: 0,
    };
    let v = p.sum()?;
    p.skip_ws();
    if p.i < p.s.len() {
        return Err(CalcError::Unexpected(p.i));
    }
    if !v.is_finite() {
        return Err(CalcError::NotFinite);
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    depth: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.i).copied()
    }

    fn sum(&mut self) -> Result<f64, CalcError> {
        let mut v = self.product()?;
        while let Some(op @ (b'+' | b'-')) = self.peek() {
            self.i += 1;
            let r = self.product()?;
            v = if op == b'+' { v + r } else { v - r };
        }
        Ok(v)
    }

    fn product(&mut self) -> Result<f64, CalcError> {
        let mut v = self.power()?;
        while let Some(op @ (b'*' | b'/' | b'%')) = self.peek() {
            self.i += 1;
            let r = self.power()?;
            v = match op {
                b'*' => v * r,
                _ if r == 0.0 => return Err(CalcError::DivisionByZero),
                b'/' => v / r,
                _ => v % r,
            };
        }
        Ok(v)
    }

    fn power(&mut self) -> Result<f64, CalcError> {
        let base = self.unary()?;
        if self.peek() == Some(b'^') {
            self.i += 1;
            self.enter()?;
            let exp = self.power()?;
            self.depth -= 1;
            return Ok(base.powf(exp));
        }
        Ok(base)
    }

    fn enter(&mut self) -> Result<(), CalcError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(CalcError::TooLong);
        }
        Ok(())
    }

    fn unary(&mut self) -> Result<f64, CalcError> {
        match self.peek() {
            Some(b'-') => {
                self.i += 1;
                self.enter()?;
                let v = -self.unary()?;
                self.depth -= 1;
                Ok(v)
            }
            Some(b'+') => {
                self.i += 1;
                self.enter()?;
                let v = self.unary()?;
                self.depth -= 1;
                Ok(v)
            }
            Some(b'(') => {
                self.i += 1;
                self.enter()?;
                let v = self.sum()?;
                self.depth -= 1;
                match self.peek() {
                    Some(b')') => {
                        self.i += 1;
                        Ok(v)
                    }
                    Some(_) => Err(CalcError::Unexpected(self.i)),
                    None => Err(CalcError::UnexpectedEnd),
                }
            }
            Some(c) if c.is_ascii_digit() || c == b'.' => {
                let start = self.i;
                while self.i < self.s.len()
                    && (self.s[self.i].is_ascii_digit() || self.s[self.i] == b'.')
                {
                    self.i += 1;
                }
                std::str::from_utf8(&self.s[start..self.i])
                    .ok()
                    .and_then(|t| t.parse::<f64>().ok())
                    .ok_or(CalcError::Unexpected(start))
            }
            Some(_) => Err(CalcError::Unexpected(self.i)),
            None => Err(CalcError::UnexpectedEnd),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn arithmetic() {
        assert_eq!(evaluate("12 * 7"), Ok(84.0));
        assert_eq!(evaluate("1 + 2 * 3"), Ok(7.0));
        assert_eq!(evaluate("(1 + 2) * 3"), Ok(9.0));
        assert_eq!(evaluate("2 ^ 3 ^ 2"), Ok(512.0));
        assert_eq!(evaluate("-3 + 10 % 4"), Ok(-1.0));
        assert_eq!(evaluate("1.5 / 0.5"), Ok(3.0));
        assert_eq!(evaluate("1 / 0"), Err(CalcError::DivisionByZero));
        assert_eq!(evaluate("2 +"), Err(CalcError::UnexpectedEnd));
        assert_eq!(evaluate("2 x"), Err(CalcError::Unexpected(2)));
        assert_eq!(evaluate(&"(".repeat(100)), Err(CalcError::TooLong));
    }

    proptest! {
        #[test]
        fn never_panics(s in ".{0,200}") {
            let _ = evaluate(&s);
        }
    }
}

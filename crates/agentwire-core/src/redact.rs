//! Credentials out of what is shown (a log line, an error, `config`, the ready line): a URL's user-info, and
//! known secrets and `Bearer` tokens in a text another server wrote. Pure.

/// `urls` (one URL or a comma-separated list, as NATS takes) with the user-info of each (a user and
/// password, or a token) replaced by `marker`; the rest of each URL as it was.
pub fn redact_userinfo(urls: &str, marker: &str) -> String {
    urls.split(',')
        .map(|url| {
            let Some((scheme, rest)) = url.split_once("://") else {
                return url.to_string();
            };
            // The user-info ends at the last `@` before any query or fragment: a password that should
            // have been percent-encoded (`a/b`) is still user-info, and is hidden rather than shown.
            let authority = rest.find(['?', '#']).unwrap_or(rest.len());
            match rest[..authority].rfind('@') {
                Some(at) => format!("{scheme}://{marker}{}", &rest[at..]),
                None => url.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `text` (say an error body a model server sent, which may echo the request's headers) with every
/// occurrence of each of `secrets` (an API key's value; empty ones are ignored) and every `Bearer <token>`
/// (any case) replaced by `marker`.
pub fn redact_secrets(text: &str, secrets: &[&str], marker: &str) -> String {
    // Bearer tokens first: a marker put in for a secret must not read as a token.
    let out = text;
    const BEARER: &str = "bearer";
    let lower = out.to_ascii_lowercase();
    let mut shown = String::with_capacity(out.len());
    let mut at = 0;
    while let Some(found) = lower[at..].find(BEARER) {
        let start = at + found + BEARER.len();
        // The token: after the spaces, up to a space, a quote or a delimiter JSON or a header would end it at.
        let rest = &out[start..];
        let gap = rest.len() - rest.trim_start_matches([' ', '\t']).len();
        let token = rest[gap..]
            .find(|c: char| {
                c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ';' | '}' | ']' | '\\')
            })
            .unwrap_or(rest.len() - gap);
        shown.push_str(&out[at..start]);
        if gap > 0 && token > 0 {
            shown.push_str(&rest[..gap]);
            shown.push_str(marker);
            at = start + gap + token;
        } else {
            at = start;
        }
    }
    shown.push_str(&out[at..]);
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        shown = shown.replace(secret, marker);
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_and_bearer_tokens_go() {
        let body = r#"{"error":"bad","echo":{"Authorization":"Bearer sk-live-123","x":"key sk-live-123"}} BEARER   abc.def; bearer"#;
        let shown = redact_secrets(body, &["sk-live-123", ""], "[redacted]");
        assert!(
            !shown.contains("sk-live-123") && !shown.contains("abc.def"),
            "{shown}"
        );
        assert_eq!(
            shown,
            r#"{"error":"bad","echo":{"Authorization":"Bearer [redacted]","x":"key [redacted]"}} BEARER   [redacted]; bearer"#
        );
        assert_eq!(
            redact_secrets("bearerless text", &[], "*"),
            "bearerless text"
        );
        assert_eq!(
            redact_secrets("Bearer tok\\nmore", &[], "*"),
            "Bearer *\\nmore"
        );
    }

    #[test]
    fn user_info_goes_and_the_rest_stays() {
        assert_eq!(
            redact_userinfo("nats://a:pw@h:4222,nats://tok@k:1,nats://plain:2", "<set>"),
            "nats://<set>@h:4222,nats://<set>@k:1,nats://plain:2"
        );
        assert_eq!(
            redact_userinfo("https://h/p?x=@", "*"),
            "https://h/p?x=@",
            "an @ in the query is not user-info"
        );
        assert_eq!(
            redact_userinfo("nats://alice:ab/cd@host:4222", "*"),
            "nats://*@host:4222",
            "a password with an unencoded / is hidden, not cut at the /"
        );
    }
}

//! Credentials out of URLs before a URL is shown (a log line, an error, `config`, the ready line). Pure.

/// `urls` (one URL or a comma-separated list, as NATS takes) with the user-info of each (a user and
/// password, or a token) replaced by `marker`; the rest of each URL as it was.
pub fn redact_userinfo(urls: &str, marker: &str) -> String {
    urls.split(',')
        .map(|url| {
            let Some((scheme, rest)) = url.split_once("://") else {
                return url.to_string();
            };
            let authority = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            match rest[..authority].rfind('@') {
                Some(at) => format!("{scheme}://{marker}{}", &rest[at..]),
                None => url.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_info_goes_and_the_rest_stays() {
        assert_eq!(
            redact_userinfo("nats://a:pw@h:4222,nats://tok@k:1,nats://plain:2", "<set>"),
            "nats://<set>@h:4222,nats://<set>@k:1,nats://plain:2"
        );
        assert_eq!(
            redact_userinfo("https://h/p@q?x=@", "*"),
            "https://h/p@q?x=@",
            "an @ past the authority is not user-info"
        );
    }
}

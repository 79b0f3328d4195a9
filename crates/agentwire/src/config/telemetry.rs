//! `[telemetry]` resolved: the OTLP/HTTP collector traces go to (the file's `otlp_endpoint`, else
//! `OTEL_EXPORTER_OTLP_ENDPOINT`), checked, and whether spans carry content. Pure: the exporter itself is
//! set up by `serve` (`crate::telemetry`).

use super::error::ConfigError;
use super::file::TelemetryFile;
use super::Environment;

/// `[telemetry]`, resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TelemetryChoice {
    /// The OTLP/HTTP collector's base URL, checked; `None`: no traces.
    pub(crate) otlp_endpoint: Option<String>,
    /// Whether spans carry the conversation's text.
    pub(crate) content: bool,
}

/// `[telemetry]`: the file's `otlp_endpoint`, else `OTEL_EXPORTER_OTLP_ENDPOINT`, checked to be an
/// `http://` or `https://` URL with a host; `content` (default false) is noted when there is no endpoint.
pub(crate) fn resolve(
    t: &TelemetryFile,
    env: &Environment,
    warnings: &mut Vec<String>,
) -> Result<TelemetryChoice, ConfigError> {
    let (endpoint, setting) = match (&t.otlp_endpoint, &env.otlp_endpoint) {
        (Some(e), _) => (Some(e.trim()), "[telemetry] otlp_endpoint"),
        (None, Some(e)) => (Some(e.trim()), super::OTLP_ENDPOINT_ENV),
        (None, None) => (None, ""),
    };
    // An empty value in the file turns traces off, whatever the environment says.
    let endpoint = endpoint.filter(|e| !e.is_empty());
    if let Some(e) = endpoint {
        check_otlp_endpoint(e).map_err(|reason| ConfigError::Telemetry { setting, reason })?;
    }
    let content = t.content.unwrap_or(false);
    if content && endpoint.is_none() {
        warnings.push(
            "[telemetry] content: no traces are exported (no otlp_endpoint), so it has no effect"
                .into(),
        );
    }
    Ok(TelemetryChoice {
        otlp_endpoint: endpoint.map(str::to_string),
        content,
    })
}

/// Whether `url` can be an OTLP/HTTP collector's base URL: `http://` or `https://` with a host, no query or
/// fragment, not already ending in `/v1/traces` (the exporter adds it). The reason never quotes the URL,
/// which may carry a token.
pub(crate) fn check_otlp_endpoint(url: &str) -> Result<(), String> {
    let traces = crate::telemetry::TRACES_PATH;
    match reqwest::Url::parse(url) {
        Ok(u) if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() => {
            Err("not an http:// or https:// URL with a host (such as http://127.0.0.1:4318)".into())
        }
        Ok(u) if u.query().is_some() || u.fragment().is_some() => {
            Err("a collector's base URL takes no query or fragment".into())
        }
        Ok(u) if u.path().trim_end_matches('/').ends_with(traces) => Err(format!(
            "ends in {traces}: give the collector's base URL (such as http://127.0.0.1:4318); {traces} is added"
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "not a URL ({e}); give the collector's base URL, such as http://127.0.0.1:4318"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(endpoint: Option<&str>) -> Environment {
        Environment {
            data_dir: "/d".into(),
            runtime_dir: None,
            host_name: "h".into(),
            set_vars: Default::default(),
            otlp_endpoint: endpoint.map(str::to_string),
        }
    }

    fn file(endpoint: Option<&str>, content: Option<bool>) -> TelemetryFile {
        TelemetryFile {
            otlp_endpoint: endpoint.map(str::to_string),
            content,
        }
    }

    #[test]
    fn the_file_then_the_environment_then_no_traces() {
        let mut w = Vec::new();
        let r = resolve(&file(None, None), &env(None), &mut w).unwrap();
        assert_eq!(r, TelemetryChoice::default(), "off, content off by default");
        let r = resolve(&file(None, None), &env(Some("http://c:4318")), &mut w).unwrap();
        assert_eq!(r.otlp_endpoint.as_deref(), Some("http://c:4318"));
        let r = resolve(
            &file(Some("https://f:4318/"), Some(true)),
            &env(Some("http://c:4318")),
            &mut w,
        )
        .unwrap();
        assert_eq!(
            (r.otlp_endpoint.as_deref(), r.content),
            (Some("https://f:4318/"), true)
        );
        let r = resolve(&file(Some(""), None), &env(Some("http://c:4318")), &mut w).unwrap();
        assert_eq!(r.otlp_endpoint, None, "an empty key turns the variable off");
        assert!(w.is_empty());
        resolve(&file(None, Some(true)), &env(None), &mut w).unwrap();
        assert_eq!(w.len(), 1, "content without an endpoint is noted");
    }

    #[test]
    fn a_bad_endpoint_is_refused_naming_where_it_came_from() {
        let mut w = Vec::new();
        for bad in [
            "127.0.0.1:4318",
            "ftp://c",
            "http://c:4318/v1/traces",
            "http://c:4318?token=x",
        ] {
            let e = resolve(&file(Some(bad), None), &env(None), &mut w).unwrap_err();
            let text = e.to_string();
            assert!(text.starts_with("[telemetry] otlp_endpoint: "), "{text}");
            assert!(!text.contains("token=x"), "the URL is not quoted: {text}");
        }
        let e = resolve(&file(None, None), &env(Some("nope")), &mut w).unwrap_err();
        assert!(
            e.to_string().starts_with("OTEL_EXPORTER_OTLP_ENDPOINT: "),
            "{e}"
        );
    }
}

//! The hub page in a real headless Chromium, driven over WebDriver (chromedriver, which `scripts/test.sh`
//! installs), against the real daemon: a NIP-XX run appears and streams in without a reload, a roost
//! session's question is answered by clicking its option and the run ends with that answer, a running turn
//! is cancelled with **Cancel**, a session is replied to and pinned, a task is added to the board, a
//! refusal is shown, and on a 390-pixel-wide screen **Needs you** shows without scrolling sideways; before its
//! data comes (the API held back with Chrome DevTools' `Network.setBlockedURLs`) the page says it is loading
//! and offers no action; more runs than a page are paged with their start times, an opened run comes into
//! view, and a tool's lines read alike over NIP-XX and roost. Beside the browser: the page is behind the
//! token, carries its Content-Security-Policy, and refuses a state change another site's page sends.

mod common;

use agentwire_roost::client::Controller;
use common::{Client, Daemon};
use fantoccini::{Client as Browser, ClientBuilder, Locator};
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long the page has to show what the daemon did: it hears turns at once and reads the roost view
/// every second, so this is slack for a loaded machine.
const PAGE_WAIT: Duration = Duration::from_secs(20);

/// A headless Chromium of `width` x `height` with its chromedriver, stopped on drop.
struct Page {
    browser: Option<Browser>,
    driver: Child,
    /// chromedriver's port: its Chrome DevTools commands are sent there ([`Page::cdp`]).
    port: u16,
}

impl Drop for Page {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn program(env: &str, name: &str) -> String {
    std::env::var(env).unwrap_or_else(|_| name.to_string())
}

impl Page {
    /// The page at `url`, once its event stream is live and its first data is shown.
    async fn open(url: &str, width: u32, height: u32) -> Page {
        let page = Page::start(width, height).await;
        page.b().goto(url).await.expect("the page opens");
        page.until(
            "the event stream",
            "return document.getElementById('link').textContent === 'live'",
        )
        .await;
        page.until(
            "the runs and the roost view read",
            "return document.getElementById('runs-loading').hidden && document.getElementById('sessions-loading').hidden",
        )
        .await;
        page
    }

    /// A browser on no page yet.
    async fn start(width: u32, height: u32) -> Page {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(program("AGENTWIRE_CHROMEDRIVER", "chromedriver"))
            .arg(format!("--port={port}"))
            .arg("--silent")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver runs (scripts/test.sh installs Debian's chromium-driver)");
        let mut page = Page {
            browser: None,
            driver,
            port,
        };
        let caps: serde_json::Map<String, Value> = serde_json::from_value(json!({
            "goog:chromeOptions": {
                "binary": program("AGENTWIRE_CHROMIUM", "/usr/bin/chromium"),
                "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
                // A window narrower than a desktop's least is a phone's screen: emulated as Chromium's
                // device mode does.
                "mobileEmulation": {"deviceMetrics": {"width": width, "height": height, "pixelRatio": 1}},
            }
        }))
        .unwrap();
        let deadline = tokio::time::Instant::now() + PAGE_WAIT;
        let browser = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(b) => break b,
                Err(e) if tokio::time::Instant::now() > deadline => {
                    panic!("no WebDriver session: {e}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        page.browser = Some(browser);
        page
    }

    /// Sends the Chrome DevTools command `cmd` to the browser (chromedriver's `goog/cdp/execute`).
    async fn cdp(&self, cmd: &str, params: Value) {
        let session = self.b().session_id().await.unwrap().expect("a session");
        let url = format!(
            "http://127.0.0.1:{}/session/{session}/goog/cdp/execute",
            self.port
        );
        let r = agentwire_agents::openai::http_client(Duration::from_secs(10))
            .unwrap()
            .post(url)
            .header("content-type", "application/json")
            .body(json!({"cmd": cmd, "params": params}).to_string())
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success(),
            "{cmd}: {}",
            r.text().await.unwrap()
        );
    }

    /// Whether the element with `id` is shown (it and its ancestors displayed).
    async fn shown(&self, id: &str) -> bool {
        let script = format!(
            "const e = document.getElementById({}); return !!e && e.getClientRects().length > 0",
            json!(id)
        );
        self.b().execute(&script, vec![]).await.unwrap() == json!(true)
    }

    fn b(&self) -> &Browser {
        self.browser.as_ref().unwrap()
    }

    /// Runs `script` until it returns something other than `false`, `null` or `""`, and gives that.
    async fn until(&self, what: &str, script: &str) -> Value {
        let deadline = tokio::time::Instant::now() + PAGE_WAIT;
        loop {
            let v = self
                .b()
                .execute(script, vec![])
                .await
                .unwrap_or(Value::Null);
            if !matches!(&v, Value::Null | Value::Bool(false)) && v != json!("") {
                return v;
            }
            if tokio::time::Instant::now() > deadline {
                let notice = self
                    .b()
                    .execute(
                        "return document.getElementById('notice-text').textContent",
                        vec![],
                    )
                    .await
                    .unwrap_or(Value::Null);
                panic!("the page never showed {what} (notice: {notice})");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Clicks the element at `xpath` (a real click, as a person's).
    async fn click(&self, xpath: &str) {
        self.b()
            .find(Locator::XPath(xpath))
            .await
            .unwrap_or_else(|e| panic!("{xpath}: {e}"))
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {xpath}: {e}"));
    }

    /// Types `text` into the field at `xpath`.
    async fn type_into(&self, xpath: &str, text: &str) {
        let field = self.b().find(Locator::XPath(xpath)).await.unwrap();
        field.clear().await.unwrap();
        field.send_keys(text).await.unwrap();
    }

    /// With `AGENTWIRE_HUB_SCREENSHOTS=<dir>`, keeps what the browser shows as `<dir>/<name>` (the
    /// screenshots in docs/ were made so).
    async fn keep(&self, name: &str) {
        if let Ok(dir) = std::env::var("AGENTWIRE_HUB_SCREENSHOTS") {
            let png = self.b().screenshot().await.unwrap();
            std::fs::write(std::path::Path::new(&dir).join(name), png).unwrap();
        }
    }

    /// Waits until the page shows the run whose prompt is `prompt` in `state`.
    async fn run_is(&self, prompt: &str, state: &str) {
        let script = format!(
            "const li = [...document.querySelectorAll('#runs-list li')].find(l => l.querySelector('.prompt').textContent === {p}); return !!li && li.dataset.state === {s}",
            p = json!(prompt),
            s = json!(state)
        );
        self.until(&format!("{prompt:?} {state}"), &script).await;
    }
}

/// The page's address with the daemon's token, as `agentwire hub` prints it.
fn hub_url(d: &Daemon) -> String {
    format!(
        "{}/?token={}",
        d.ready["http"].as_str().unwrap(),
        d.ready["http_token"].as_str().unwrap()
    )
}

fn socket(d: &Daemon) -> std::path::PathBuf {
    d.ready["roost_socket"].as_str().unwrap().into()
}

async fn control(d: &Daemon, op: &str, args: Value) -> Value {
    let mut c = Controller::connect(&socket(d)).await.unwrap();
    c.call(op, args)
        .await
        .unwrap_or_else(|e| panic!("{op}: {e}"))
}

/// The turn API's newest roost turn whose prompt is `prompt`, once it ended.
async fn ended_roost_turn(d: &Daemon, prompt: &str) -> Value {
    let http = agentwire_agents::openai::http_client(Duration::from_secs(10)).unwrap();
    let url = format!(
        "{}/api/v1/turns?protocol=roost",
        d.ready["http"].as_str().unwrap()
    );
    let deadline = tokio::time::Instant::now() + PAGE_WAIT;
    loop {
        let page: Value = http
            .get(&url)
            .bearer_auth(d.ready["http_token"].as_str().unwrap())
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .map(|b| serde_json::from_slice(&b).unwrap_or(Value::Null))
            .unwrap();
        let found = page["turns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["prompt"] == prompt && t["state"] == "ended")
            .cloned();
        if let Some(t) = found {
            return t;
        }
        assert!(tokio::time::Instant::now() < deadline, "{prompt}: {page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_stream_in_live_and_are_answered_and_cancelled_from_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &[]);
    let page = Page::open(&hub_url(&d), 1280, 900).await;
    // Set once; a reload would lose it.
    page.b()
        .execute("window.stayed = true; return true", vec![])
        .await
        .unwrap();

    // A NIP-XX run appears while it runs, and its text streams into the open run.
    let mut c = Client::new(&d.relay, d.agent).await;
    let prompt = c.prompt_event("sleep 3000", None);
    c.watch(&prompt.id);
    c.publish(&prompt).await;
    page.run_is("sleep 3000", "running").await;
    page.click("//ul[@id='runs-list']/li[.//span[@class='prompt' and text()='sleep 3000']]//span[@class='prompt']")
        .await;
    let first = page
        .until(
            "some streamed text",
            "const t = document.getElementById('run-text').textContent; return t.length > 0 ? t.length : null",
        )
        .await
        .as_u64()
        .unwrap();
    page.until(
        "more streamed text while the run still runs",
        &format!(
            "const t = document.getElementById('run-text').textContent; const s = [...document.querySelectorAll('#runs-list li')].find(l => l.querySelector('.prompt').textContent === 'sleep 3000').dataset.state; return t.length > {first} && s === 'running'"
        ),
    )
    .await;
    // Opened part way, the run shows each tick once and in order: the history and the live stream
    // meet without a repeat or a hole.
    let ticks = page
        .b()
        .execute(
            "return document.getElementById('run-text').textContent",
            vec![],
        )
        .await
        .unwrap();
    let ticks: Vec<String> = ticks.as_str().unwrap().lines().map(String::from).collect();
    let expected: Vec<String> = (1..=ticks.len()).map(|n| format!("tick {n}")).collect();
    assert!(ticks.len() >= 2 && ticks == expected, "{ticks:?}");
    let run = c
        .collect(
            &prompt.id,
            Duration::from_secs(20),
            Duration::from_millis(100),
        )
        .await;
    page.run_is("sleep 3000", "done").await;
    let shown = page
        .until(
            "the whole answer",
            &format!(
                "const t = document.getElementById('run-text').textContent; return t === {} ? t : null",
                json!(run.text())
            ),
        )
        .await;
    assert_eq!(shown, json!(run.text()));

    // A roost session's question, answered by clicking its option: the run ends with that answer.
    control(
        &d,
        "dispatch",
        json!({"profile": "demo", "task": "ask colour? | red | green", "name": "painter"}),
    )
    .await;
    let buttons = page
        .until(
            "the question's buttons",
            "const q = [...document.querySelectorAll('#needs-list li.question')].find(l => l.querySelector('.ask').textContent === 'colour?'); return q ? [...q.querySelectorAll('button.option')].map(b => b.textContent) : null",
        )
        .await;
    assert_eq!(buttons, json!(["red", "green"]));
    page.click("//ul[@id='needs-list']//button[text()='green']")
        .await;
    let turn = ended_roost_turn(&d, "ask colour? | red | green").await;
    assert_eq!(turn["outcome"]["text"], "green", "{turn}");
    page.until(
        "Needs you empty again",
        "return document.querySelectorAll('#needs-list li').length === 0 && !document.getElementById('needs-empty').hidden",
    )
    .await;

    // A question taking several options: ticked, then sent together.
    control(
        &d,
        "dispatch",
        json!({"profile": "demo", "task": "choose toppings? | ham | olives | basil", "name": "cook"}),
    )
    .await;
    page.until(
        "the boxes",
        "return document.querySelectorAll('#needs-list li.question .option-box').length === 3",
    )
    .await;
    for pick in ["olives", "basil"] {
        page.click(&format!(
            "//ul[@id='needs-list']//label[normalize-space()='{pick}']/input"
        ))
        .await;
    }
    page.click("//ul[@id='needs-list']//button[text()='Send']")
        .await;
    let turn = ended_roost_turn(&d, "choose toppings? | ham | olives | basil").await;
    assert_eq!(turn["outcome"]["text"], "olives, basil", "{turn}");

    // Cancel on a running turn ends it, as its requester's cancel would.
    let prompt = c.prompt_event("sleep 60000", None);
    c.watch(&prompt.id);
    c.publish(&prompt).await;
    page.run_is("sleep 60000", "running").await;
    page.click("//ul[@id='runs-list']/li[.//span[@class='prompt' and text()='sleep 60000']]//button[text()='Cancel']")
        .await;
    let run = c
        .collect(
            &prompt.id,
            Duration::from_secs(20),
            Duration::from_millis(100),
        )
        .await;
    assert_eq!(run.error_code(), "CANCELLED");
    page.run_is("sleep 60000", "cancelled").await;
    let stayed = page
        .b()
        .execute("return window.stayed === true", vec![])
        .await
        .unwrap();
    assert_eq!(stayed, json!(true), "the page was never reloaded");
    page.b().clone().close().await.unwrap();
}

/// The turn API's turns (newest first, up to 500).
async fn api_turns(d: &Daemon, query: &str) -> Vec<Value> {
    let http = agentwire_agents::openai::http_client(Duration::from_secs(10)).unwrap();
    let url = format!("{}/api/v1/turns?{query}", d.ready["http"].as_str().unwrap());
    let page: Value = http
        .get(&url)
        .bearer_auth(d.ready["http_token"].as_str().unwrap())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .map(|b| serde_json::from_slice(&b).unwrap())
        .unwrap();
    page["turns"].as_array().unwrap().clone()
}

/// The ids of the runs the list shows, top to bottom.
const LISTED: &str =
    "return [...document.querySelectorAll('#runs-list li')].map(l => l.dataset.id)";

/// More runs than one page: the list shows the newest page, each run with its start time; **Older** shows
/// the older ones and **Newer** goes back; a run opened from the top of the list comes into view; and a
/// tool's lines read the same whichever front its run came through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_paged_with_their_start_times_and_an_opened_run_comes_into_view() {
    /// Runs on one page of the list (hub.js `RUNS_PAGE`).
    const RUNS_PAGE: usize = 25;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &["--rate-burst", "100"]);
    let mut c = Client::new(&d.relay, d.agent).await;
    // A tool's run over NIP-XX, and the same as a roost job.
    assert_eq!(c.ask("calc 6*7").await.text(), "42");
    control(
        &d,
        "dispatch",
        json!({"profile": "demo", "task": "calc 6*7", "name": "calc"}),
    )
    .await;
    ended_roost_turn(&d, "calc 6*7").await;
    let runs = RUNS_PAGE + 5;
    for n in 0..runs - 2 {
        c.publish(&c.prompt_event(&format!("quick {n}"), None))
            .await;
    }
    let deadline = tokio::time::Instant::now() + PAGE_WAIT;
    let all = loop {
        let done = api_turns(&d, "state=done&limit=500").await;
        if done.len() == runs {
            break done;
        }
        assert!(tokio::time::Instant::now() < deadline, "{done:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let ids: Vec<&str> = all.iter().map(|t| t["id"].as_str().unwrap()).collect();

    let page = Page::open(&hub_url(&d), 1280, 900).await;
    let first = page.b().execute(LISTED, vec![]).await.unwrap();
    assert_eq!(
        first,
        json!(ids[..RUNS_PAGE]),
        "the newest page, newest first"
    );
    // Each run with the time it started, as the API has it.
    let times = page
        .b()
        .execute(
            "return [...document.querySelectorAll('#runs-list li')].map(l => { const t = l.querySelector('time.started'); return [t.textContent, Date.parse(t.dateTime)]; })",
            vec![],
        )
        .await
        .unwrap();
    for (shown, t) in times.as_array().unwrap().iter().zip(&all) {
        assert!(!shown[0].as_str().unwrap().is_empty(), "{shown}");
        assert_eq!(shown[1], t["started_ms"], "{shown} {t}");
    }

    // A run opened from the top of a long list: its detail, below the list, is brought into view.
    page.b()
        .execute("window.scrollTo(0, 0); return true", vec![])
        .await
        .unwrap();
    let top = format!(
        "//ul[@id='runs-list']/li[@data-id='{}']//span[@class='prompt']",
        ids[0]
    );
    page.click(&top).await;
    page.until(
        "the open run within the window",
        "const r = document.getElementById('run').getBoundingClientRect(); return !document.getElementById('run').hidden && r.top >= 0 && r.top < window.innerHeight",
    )
    .await;

    // Older: the rest, older than every run on the first page; Newer: back.
    page.click("//button[@id='runs-older']").await;
    let older = page
        .until(
            "the older page",
            &format!("const ids = [...document.querySelectorAll('#runs-list li')].map(l => l.dataset.id); return ids.length === {} ? ids : null", runs - RUNS_PAGE),
        )
        .await;
    assert_eq!(older, json!(ids[RUNS_PAGE..]), "the older ones, in order");
    assert!(!page.shown("runs-older").await, "nothing older");
    // A tool's lines (its runs, the oldest, are on this page): the same for the NIP-XX run and the roost
    // job.
    for protocol in ["nipxx", "roost"] {
        let turn = all
            .iter()
            .find(|t| t["prompt"] == "calc 6*7" && t["protocol"] == protocol)
            .unwrap();
        let id = turn["id"].as_str().unwrap().to_string();
        // Who asked: the NIP-XX client's key (by its first 8 hex digits), the roost job.
        let requester = turn["requester"].as_str().unwrap();
        let by = match protocol {
            "nipxx" => format!(" · by {}… · ", &requester[..8]),
            _ => format!(" · by {requester} · "),
        };
        assert!(
            protocol != "roost" || requester.starts_with("roost:"),
            "{turn}"
        );
        page.b()
            .execute(
                "document.querySelector(`#runs-list li[data-id=\"${arguments[0]}\"] .prompt`).click(); return true",
                vec![json!(id)],
            )
            .await
            .unwrap();
        let lines = page
            .until(
                &format!("the {protocol} run's tool lines"),
                &format!("const l = [...document.querySelectorAll('#run-tools li')].map(l => l.textContent); return l.length === 2 && document.getElementById('run-text').textContent === '42' && document.getElementById('run-meta').textContent.includes(' · {protocol}') && document.getElementById('run-meta').textContent.includes({by:?}) ? l : null"),
            )
            .await;
        assert_eq!(
            lines,
            json!(["[tool calculator start 6*7]", "[tool calculator result 42]"]),
            "{protocol}"
        );
    }
    page.click("//button[@id='runs-newer']").await;
    page.until(
        "the newest page again",
        &format!("return JSON.stringify([...document.querySelectorAll('#runs-list li')].map(l => l.dataset.id)) === {}", json!(json!(ids[..RUNS_PAGE]).to_string())),
    )
    .await;

    page.b().clone().close().await.unwrap();
}

/// Before the data comes (the API held back), the page says it is loading: no "No runs yet.", no
/// "Nothing waits for you.", no button to press; once it comes, the empty lists say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_says_it_is_loading_and_offers_no_action_before_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &[]);
    let page = Page::start(1280, 900).await;
    page.cdp("Network.enable", json!({})).await;
    page.cdp("Network.setBlockedURLs", json!({"urls": ["*/api/v1/*"]}))
        .await;
    page.b().goto(&hub_url(&d)).await.unwrap();
    page.until(
        "the script started",
        "return document.readyState === 'complete' && document.getElementById('roost-link').textContent.startsWith('roost:')",
    )
    .await;
    for loading in [
        "runs-loading",
        "needs-loading",
        "sessions-loading",
        "tasks-loading",
    ] {
        assert!(page.shown(loading).await, "{loading} is shown");
    }
    for empty in [
        "runs-empty",
        "needs-empty",
        "sessions-empty",
        "tasks-empty",
        "runs-pages",
    ] {
        assert!(
            !page.shown(empty).await,
            "{empty} is not shown before the data"
        );
    }
    let buttons = page
        .b()
        .execute(
            "return [...document.querySelectorAll('main button')].filter(b => b.getClientRects().length > 0).map(b => b.textContent)",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(buttons, json!([]), "no action before the data");

    // The data let through: the page as it is, empty.
    page.cdp("Network.setBlockedURLs", json!({"urls": []}))
        .await;
    page.b().refresh().await.unwrap();
    page.until(
        "No runs yet.",
        "return document.getElementById('link').textContent === 'live' && document.getElementById('runs-empty').getClientRects().length > 0",
    )
    .await;
    for loading in [
        "runs-loading",
        "needs-loading",
        "sessions-loading",
        "tasks-loading",
    ] {
        page.until(
            &format!("{loading} gone"),
            &format!("return document.getElementById('{loading}').hidden"),
        )
        .await;
    }
    assert!(page.shown("needs-empty").await && page.shown("task-form").await);
    assert!(!page.shown("runs-pages").await, "one page only");
    page.b().clone().close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_and_the_board_are_steered_from_the_page_and_a_refusal_is_shown() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &[]);
    let page = Page::open(&hub_url(&d), 1280, 900).await;
    control(
        &d,
        "dispatch",
        json!({"profile": "demo", "task": "hello there", "name": "greeter"}),
    )
    .await;
    ended_roost_turn(&d, "hello there").await;
    let session = "//ul[@id='sessions-list']/li[.//strong[@class='name' and text()='greeter']]";
    page.until(
        "the session",
        "return [...document.querySelectorAll('#sessions-list .name')].some(n => n.textContent === 'greeter')",
    )
    .await;

    // A reply typed on the page reaches the session: its next turn answers it.
    page.type_into(
        &format!("{session}//input[@class='session-text']"),
        "how are you",
    )
    .await;
    page.click(&format!("{session}//button[text()='Reply']"))
        .await;
    let turn = ended_roost_turn(&d, "how are you").await;
    assert_eq!(turn["outcome"]["text"], "You said: how are you", "{turn}");
    page.run_is("how are you", "done").await;

    // Pinned from the page, as `jobs pin` would.
    page.click(&format!("{session}//button[text()='Pin']"))
        .await;
    page.until(
        "the session pinned",
        "return [...document.querySelectorAll('#sessions-list li')].some(l => l.querySelector('.pin').textContent === 'pinned')",
    )
    .await;
    let rows = control(&d, "rows", json!({})).await;
    assert_eq!(rows["rows"][0]["pinned"], true, "{rows}");

    // A task added on the page is on the board.
    page.type_into("//input[@id='task-title']", "write the release notes")
        .await;
    page.click("//form[@id='task-form']//button[text()='Add']")
        .await;
    page.until(
        "the task on the board",
        "return [...document.querySelectorAll('#tasks-list .title')].some(t => t.textContent === 'write the release notes')",
    )
    .await;
    let board = control(&d, "task", json!({"action": "list"})).await;
    assert_eq!(
        board["tasks"][0]["title"], "write the release notes",
        "{board}"
    );

    // A refusal is shown, and nothing was added.
    page.type_into(
        "//input[@id='task-title']",
        "after a task that is not there",
    )
    .await;
    page.type_into("//input[@id='task-after']", "#99").await;
    page.click("//form[@id='task-form']//button[text()='Add']")
        .await;
    let shown = page
        .until(
            "the refusal",
            "const n = document.getElementById('notice'); return n.hidden ? null : document.getElementById('notice-text').textContent",
        )
        .await;
    assert!(
        shown.as_str().unwrap().contains("not on the board"),
        "{shown}"
    );
    let board = control(&d, "task", json!({"action": "list"})).await;
    assert_eq!(board["tasks"].as_array().unwrap().len(), 1, "{board}");
    // Every feed event once, though the view is read every second and after each action.
    let seqs = page
        .b()
        .execute(
            "return [...document.querySelectorAll('#feed-list li')].map(l => l.dataset.seq)",
            vec![],
        )
        .await
        .unwrap();
    let seqs: Vec<String> = serde_json::from_value(seqs).unwrap();
    let unique: std::collections::BTreeSet<&String> = seqs.iter().collect();
    assert!(seqs.len() > 3 && unique.len() == seqs.len(), "{seqs:?}");
    page.keep("hub-desktop.png").await;
    page.b().clone().close().await.unwrap();
}

/// A roost profile `name` running `script` (written to `dir`) on the Python client (sdk/python), as config
/// TOML.
fn python_profile(dir: &std::path::Path, name: &str, script: &str) -> String {
    let path = dir.join(format!("{name}.py"));
    std::fs::write(&path, script).unwrap();
    let sdk = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/python");
    format!(
        "[roost.profiles.{name}]\ncommand = [\"python3\", \"{}\", \"{}\"]\ntask = \"argv\"\nprotocol = true\n",
        path.display(),
        sdk.display()
    )
}

/// A roost agent on the Python client (sdk/python) that asks which branch to take and is done once told.
const ASKER: &str = r#"
import sys, threading
sys.path.insert(0, sys.argv[1])
from roost_agent import RoostAgent
done = threading.Event()
def on_reply(r):
    agent.report("done", summary="took " + r.text,
                 extra={"prLinks": ["https://github.com/o/r/pull/7"], "remoteAt": "https://pi.example/s/fork"})
    done.set()
agent = RoostAgent.from_env("asker", version="1", on_reply=on_reply)
agent.report("blocked", summary="at the fork", question="Which branch?", choices=["main", "dev"],
             waiting_for="question")
done.wait(60)
agent.close()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_session_is_answered_from_needs_you() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agentwire.toml");
    std::fs::write(&cfg, python_profile(dir.path(), "asker", ASKER)).unwrap();
    let d = Daemon::start(
        &dir.path().join("data"),
        &["--config", cfg.to_str().unwrap()],
    );
    let page = Page::open(&hub_url(&d), 1280, 900).await;
    control(&d, "dispatch", json!({"profile": "asker", "name": "fork"})).await;
    let choices = page
        .until(
            "the session's question",
            "const c = document.querySelector('#needs-list li.blocked'); return c && c.querySelector('.ask').textContent === 'Which branch?' ? [...c.querySelectorAll('button.choice')].map(b => b.textContent) : null",
        )
        .await;
    assert_eq!(choices, json!(["main", "dev"]));
    // No concierge suggested anything: nothing to accept.
    let accept = page
        .b()
        .execute(
            "return document.querySelector('#needs-list li.blocked button.accept').getClientRects().length",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(accept, json!(0), "no Accept without a suggestion");
    page.click("//ul[@id='needs-list']/li[contains(@class,'blocked')]//button[text()='dev']")
        .await;
    page.until(
        "the session done with the choice",
        "return [...document.querySelectorAll('#sessions-list li')].some(l => l.querySelector('.summary').textContent === 'took dev')",
    )
    .await;
    // The pull request its agent reported is a link on its row, and where it is reached is said.
    let links = page
        .until(
            "the session's PR link",
            "const l = [...document.querySelectorAll('#sessions-list li')].find(l => l.querySelector('.summary').textContent === 'took dev'); const a = l && l.querySelector('.links a.pr'); return a ? [a.textContent, a.getAttribute('href'), a.getAttribute('rel'), l.querySelector('.links .remote').textContent] : null",
        )
        .await;
    assert_eq!(
        links,
        json!([
            "PR #7",
            "https://github.com/o/r/pull/7",
            "noopener noreferrer",
            "remote at https://pi.example/s/fork"
        ])
    );
    page.until(
        "Needs you empty again",
        "return document.querySelectorAll('#needs-list li').length === 0",
    )
    .await;
    page.b().clone().close().await.unwrap();
}

/// A concierge on the Python client: it suggests `dev` for the session `fork` when a digest comes, and
/// says what it heard when asked anything else.
const CONCIERGE: &str = r#"
import sys, threading
sys.path.insert(0, sys.argv[1])
from roost_agent import RoostAgent
def on_reply(r):
    if r.text.startswith("<roost-digest"):
        try:
            agent.suggest("fork", "dev", why="dev is where the work is")
        except Exception:
            pass
    else:
        agent.say("answer", "heard: " + r.text)
agent = RoostAgent.from_env("conc", version="1", on_reply=on_reply,
                           capabilities=["report", "replies", "agent-items"])
agent.report("working", summary="watching", extra={"agentItems": True})
threading.Event().wait(120)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_concierge_is_steered_from_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agentwire.toml");
    std::fs::write(
        &cfg,
        format!(
            "[roost]\nconcierge = \"conc\"\n\n{}\n{}",
            python_profile(dir.path(), "asker", ASKER),
            python_profile(dir.path(), "conc", CONCIERGE)
        ),
    )
    .unwrap();
    let d = Daemon::start(
        &dir.path().join("data"),
        &["--config", cfg.to_str().unwrap()],
    );
    let page = Page::open(&hub_url(&d), 1280, 900).await;

    // Turned on from the page.
    page.click("//button[@id='concierge-toggle' and text()='Turn on']")
        .await;
    page.until(
        "the concierge on",
        "return document.getElementById('concierge-status').textContent.startsWith('on')",
    )
    .await;

    // Its suggestion for a waiting session, accepted from Needs you.
    control(&d, "dispatch", json!({"profile": "asker", "name": "fork"})).await;
    let suggested = page
        .until(
            "the concierge's suggestion",
            "const s = document.querySelector('#needs-list li.blocked .suggestion span'); return s ? s.textContent : null",
        )
        .await;
    assert_eq!(suggested, json!("Concierge suggests: dev"));
    page.click("//ul[@id='needs-list']//button[text()='Accept']")
        .await;
    page.until(
        "the session done with the suggestion",
        "return [...document.querySelectorAll('#sessions-list li')].some(l => l.querySelector('.summary').textContent === 'took dev')",
    )
    .await;

    // Asked from the page; what it said shows.
    page.type_into("//input[@id='concierge-text']", "what needs me?")
        .await;
    page.click("//form[@id='concierge-form']//button[text()='Ask']")
        .await;
    page.until(
        "what the concierge said",
        "return [...document.querySelectorAll('#concierge-said li')].some(l => l.textContent === 'answer heard: what needs me?')",
    )
    .await;

    // Its policy, and a standing order added and removed.
    let select = page
        .b()
        .find(Locator::Id("concierge-answer"))
        .await
        .unwrap();
    select.select_by_value("always").await.unwrap();
    page.until(
        "the policy",
        "return document.getElementById('concierge-status').textContent.includes('answers always')",
    )
    .await;
    page.type_into("//input[@id='order-text']", "tell me when the build breaks")
        .await;
    page.type_into("//input[@id='order-when']", "daily 18:00")
        .await;
    page.click("//form[@id='order-form']//button[text()='Add order']")
        .await;
    page.until(
        "the order",
        "return [...document.querySelectorAll('#orders-list .text')].some(t => t.textContent.endsWith('tell me when the build breaks'))",
    )
    .await;
    let orders = control(&d, "concierge-order", json!({"action": "list"})).await;
    assert_eq!(
        orders["orders"][0]["text"], "tell me when the build breaks",
        "{orders}"
    );
    page.click("//ul[@id='orders-list']//button[text()='Remove']")
        .await;
    page.until(
        "the order gone",
        "return document.querySelectorAll('#orders-list li').length === 0",
    )
    .await;
    let status = control(&d, "concierge", json!({"action": "status"})).await;
    assert_eq!(status["policy"]["answer"], "always", "{status}");
    page.b().clone().close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_phone_sized_screen_needs_you_shows_without_scrolling_sideways() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &[]);
    control(
        &d,
        "dispatch",
        json!({"profile": "demo", "task": "confirm Ship the release to every customer today?", "name": "shipper"}),
    )
    .await;
    let page = Page::open(&hub_url(&d), 390, 844).await;
    let buttons = page
        .until(
            "the question",
            "const q = document.querySelector('#needs-list li.question'); return q ? [...q.querySelectorAll('button.option')].map(b => b.textContent) : null",
        )
        .await;
    assert_eq!(buttons, json!(["Yes", "No"]));
    let cards = page
        .b()
        .execute(
            "return document.querySelectorAll('#needs-list li').length",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        cards,
        json!(1),
        "the session's question is its turn's, shown once"
    );
    let fit = page
        .b()
        .execute(
            "const w = window.innerWidth; const r = document.getElementById('needs').getBoundingClientRect(); \
             const h = document.getElementById('needs-h'); \
             return {w, scroll: document.documentElement.scrollWidth, left: r.left, right: r.right, \
                     top: h.getBoundingClientRect().top, text: h.textContent, height: window.innerHeight}",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(fit["text"], "Needs you");
    let w = fit["w"].as_f64().unwrap();
    assert!(w <= 400.0, "a phone-sized window: {fit}");
    assert!(
        fit["scroll"].as_f64().unwrap() <= w,
        "no sideways scrolling: {fit}"
    );
    assert!(
        fit["left"].as_f64().unwrap() >= 0.0 && fit["right"].as_f64().unwrap() <= w,
        "{fit}"
    );
    assert!(
        fit["top"].as_f64().unwrap() < fit["height"].as_f64().unwrap(),
        "on the first screen: {fit}"
    );
    page.keep("hub-phone.png").await;
    page.click("//ul[@id='needs-list']//button[text()='Yes']")
        .await;
    let turn = ended_roost_turn(&d, "confirm Ship the release to every customer today?").await;
    assert_eq!(turn["outcome"]["text"], "yes", "{turn}");
    page.b().clone().close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_behind_the_token_and_refuses_other_sites() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("data"), &[]);
    let base = d.ready["http"].as_str().unwrap().to_string();
    let token = d.ready["http_token"].as_str().unwrap().to_string();
    let http = agentwire_agents::openai::http_client(Duration::from_secs(10)).unwrap();

    let bare = http.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(bare.status().as_u16(), 401);
    let csp = bare.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        bare.text().await.unwrap().contains("agentwire hub"),
        "how to open it"
    );
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }
    let page = http
        .get(format!("{base}/"))
        .header("cookie", format!("agentwire_token={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.headers().contains_key("content-security-policy"));
    let html = page.text().await.unwrap();
    assert!(
        html.contains("Needs you"),
        "the page, to a browser with the token"
    );

    // A state change a page of another site sends, with the cookie a browser would add: refused, and
    // nothing changed.
    for (origin, site) in [
        (Some("http://evil.example"), None),
        (None, Some("cross-site")),
    ] {
        let mut req = http
            .post(format!("{base}/api/v1/roost/task"))
            .header("cookie", format!("agentwire_token={token}"))
            .header("content-type", "application/json")
            .body(json!({"action": "add", "title": "planted"}).to_string());
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        if let Some(s) = site {
            req = req.header("sec-fetch-site", s);
        }
        assert_eq!(req.send().await.unwrap().status().as_u16(), 403);
    }
    let board = control(&d, "task", json!({"action": "list"})).await;
    assert_eq!(board["tasks"], json!([]), "{board}");
    // Turning the concierge on with a launch of its own would dispatch any profile: not the page's.
    let launch = http
        .post(format!("{base}/api/v1/roost/concierge"))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body(
            json!({"action": "on", "launch": {"profile": "demo", "task": "anything"}}).to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(launch.status().as_u16(), 403);
    let rows = control(&d, "rows", json!({})).await;
    assert_eq!(rows["rows"], json!([]), "nothing was started: {rows}");

    // `agentwire hub` prints the page's address with the token, and opens it with `$BROWSER`.
    let opened = dir.path().join("opened");
    let browser = dir.path().join("browser.sh");
    std::fs::write(
        &browser,
        format!("#!/bin/sh\necho \"$1\" > {}\n", opened.display()),
    )
    .unwrap();
    std::fs::set_permissions(
        &browser,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("hub")
        .env("BROWSER", &browser)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = format!("{base}/?token={token}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), url);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !opened.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the browser was never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = std::fs::read_to_string(&opened).unwrap_or_default();
        if got.trim() == url {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "opened {got:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The page's own origin, and a program with no origin, are served.
    let own = http
        .post(format!("{base}/api/v1/roost/task"))
        .bearer_auth(&token)
        .header("origin", &base)
        .header("content-type", "application/json")
        .body(json!({"action": "add", "title": "mine"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(own.status().as_u16(), 200);
    // An op the page does not take, and a refusal with its code.
    let shutdown = http
        .post(format!("{base}/api/v1/roost/shutdown"))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(shutdown.status().as_u16(), 404);
    let refused = http
        .post(format!("{base}/api/v1/roost/reply"))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body(json!({"id": "j-none", "text": "hi"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 404);
    let body: Value = serde_json::from_slice(&refused.bytes().await.unwrap()).unwrap();
    assert_eq!(body["code"], "not_found", "{body}");
}

//! The GitHub service's pure parts: link headers, origins, check URLs, error shapes, settings.

use super::*;

#[test]
fn github_link_header_next_page() {
    let mut h = HeaderMap::new();
    h.insert(
        reqwest::header::LINK,
        "<https://api.github.com/repositories/1/pulls?page=2>; rel=\"next\", <https://api.github.com/repositories/1/pulls?page=5>; rel=\"last\""
            .parse()
            .unwrap(),
    );
    assert_eq!(
        next_link(&h).as_deref(),
        Some("https://api.github.com/repositories/1/pulls?page=2")
    );
    h.insert(
        reqwest::header::LINK,
        "<https://x/?page=1>; rel=\"prev\"".parse().unwrap(),
    );
    assert_eq!(next_link(&h), None);
}

#[test]
fn github_token_goes_to_the_api_origin_only() {
    assert!(
        same_origin(
            "https://ghe.example/api/v3",
            "https://ghe.example/api/v3/x?page=2"
        )
        .is_ok()
    );
    assert!(same_origin("https://api.github.com", "https://evil.example/x").is_err());
    assert!(same_origin("http://127.0.0.1:1", "http://127.0.0.1:2/x").is_err());
}

#[test]
fn github_check_url_job_id() {
    assert_eq!(
        actions_job_id("https://github.com/o/r/actions/runs/11/job/22"),
        Some(22)
    );
    assert_eq!(
        actions_job_id("https://app.circleci.com/pipelines/gh/o/r/1/workflows/x"),
        None
    );
}

#[test]
fn github_errors_carry_codes_and_reset_time() {
    let e = GithubError::RateLimited {
        reset_at: 1_800_000_000,
        message: "m".into(),
    };
    let v = e.to_json();
    assert_eq!(e.http_status(), 429);
    assert_eq!(v["reset_at_iso"], "2027-01-15T08:00:00Z");
    assert_eq!(GithubError::NotFound("x".into()).http_status(), 502);
    let u = GithubError::unavailable("no token");
    assert_eq!(u.http_status(), 503);
    assert_eq!(u.to_json()["code"], "github_unavailable");
}

#[test]
fn github_settings_from_config_keys() {
    let keys = json!({"github": {"api_base": "https://ghe.example/api/v3/", "gh_fallback": false}});
    let s = Settings::from_keys(keys.as_object().unwrap());
    assert_eq!(s.api_base, "https://ghe.example/api/v3");
    assert!(!s.gh_fallback);
    assert_eq!(s.gh_hostname().as_deref(), Some("ghe.example"));
    assert_eq!(
        Settings::default().gh_hostname().as_deref(),
        Some("github.com")
    );
}

//! A remote URL → GitHub `owner/name`: `https://HOST/OWNER/NAME(.git)`, with or without
//! credentials or a port, `ssh://git@HOST(:PORT)/OWNER/NAME(.git)` and the scp form
//! `git@HOST:OWNER/NAME(.git)`. The host is not compared with the API base: the configured
//! API decides which GitHub is asked.

/// `(owner, name)` of a remote URL, or `None` when it names no owner/repository.
pub fn parse_remote(url: &str) -> Option<(String, String)> {
    let url = url.trim();
    let path = if let Some((_, rest)) = url.split_once("://") {
        // scheme://[user@]host[:port]/owner/name
        rest.split_once('/')?.1
    } else {
        // [user@]host:owner/name (scp form); a local path has no ':' before a '/'.
        let (host, path) = url.split_once(':')?;
        if host.contains('/') || host.is_empty() {
            return None;
        }
        path
    };
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    let mut parts = path.split('/');
    let (owner, name) = (parts.next()?, parts.next()?);
    let ok = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (parts.next().is_none() && ok(owner) && ok(name)).then(|| (owner.to_owned(), name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::parse_remote;

    #[test]
    fn github_remote_forms() {
        let want = Some(("octo-org".to_owned(), "hello.world".to_owned()));
        for u in [
            "https://github.com/octo-org/hello.world.git",
            "https://github.com/octo-org/hello.world",
            "https://user:pw@github.com/octo-org/hello.world.git",
            "http://ghe.example:8080/octo-org/hello.world/",
            "ssh://git@github.com/octo-org/hello.world.git",
            "ssh://git@ghe.example:2222/octo-org/hello.world",
            "git@github.com:octo-org/hello.world.git",
            "github.com:octo-org/hello.world",
        ] {
            assert_eq!(parse_remote(u), want, "{u}");
        }
        for u in [
            "/srv/git/repo.git",
            "https://github.com/only-owner",
            "https://github.com/a/b/c",
            "git@github.com:../x",
            "",
        ] {
            assert_eq!(parse_remote(u), None, "{u}");
        }
    }
}

//! Where each value comes from: the command line, the environment and the `--config` file
//! layered in that order of precedence ([`parse_from`]), the file's keys checked like flags,
//! and the effective configuration `--check-config` prints with each value's source
//! ([`Origin`]), secrets redacted.

use super::*;

/// The parsed command line, and where each serving value came from.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub(crate) cli: Cli,
    pub(crate) origin: Origin,
}

/// Where each value came from (for `--check-config`).
#[derive(Debug)]
pub(crate) struct Origin {
    matches: ArgMatches,
    from_file: BTreeSet<String>,
    file: Option<PathBuf>,
}

/// Parses the process's arguments, the environment and the `--config` file; exits with
/// clap's message on a command-line error.
pub(crate) fn parse() -> Result<Parsed> {
    parse_from(std::env::args_os().collect())
}

/// [`parse`] of `argv` (its first element is the program name).
pub(crate) fn parse_from(mut argv: Vec<OsString>) -> Result<Parsed> {
    let command = Cli::command();
    let matches = command
        .clone()
        .try_get_matches_from(&argv)
        .unwrap_or_else(|e| e.exit());
    let file = match (&matches.subcommand(), matches.get_one::<PathBuf>("config")) {
        (None, Some(file)) => file.clone(),
        _ => {
            let cli = Cli::from_arg_matches(&matches).map_err(|e| anyhow!(one_line(&e)))?;
            return Ok(Parsed {
                cli,
                origin: Origin {
                    matches,
                    from_file: BTreeSet::new(),
                    file: None,
                },
            });
        }
    };
    let (extra, from_file) = file_args(&command, &matches, &file)?;
    argv.extend(extra.into_iter().flat_map(|args| args.args));
    let matches = command.try_get_matches_from(&argv).map_err(|e| {
        anyhow!(
            "{} (with the settings of the configuration file {})",
            one_line(&e),
            file.display()
        )
    })?;
    let cli = Cli::from_arg_matches(&matches).map_err(|e| anyhow!(one_line(&e)))?;
    Ok(Parsed {
        cli,
        origin: Origin {
            matches,
            from_file,
            file: Some(file),
        },
    })
}

/// The first line of a clap error, without its `error: ` prefix.
fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_owned()
}

/// The command-line arguments one key of a configuration file stands for.
struct FileArgs {
    args: Vec<OsString>,
}

/// The arguments the file `path` adds (per key), and the ids of the flags it sets; checks
/// every key and each value on its own.
fn file_args(
    command: &clap::Command,
    given: &ArgMatches,
    path: &Path,
) -> Result<(Vec<FileArgs>, BTreeSet<String>)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the configuration file {}", path.display()))?;
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let line = e.span().map_or(0, |span| {
            text[..span.start.min(text.len())].lines().count().max(1)
        });
        anyhow!(
            "{}:{line}: {} (the file is TOML: key = value, one per line)",
            path.display(),
            e.message().trim_end()
        )
    })?;
    let in_file = |key: &str, why: &str| anyhow!("{}: key `{key}`: {why}", path.display());
    let mut extra = Vec::new();
    let mut from_file = BTreeSet::new();
    for (key, value) in &table {
        let Some(arg) = command
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()))
        else {
            bail!(
                "{}: unknown key `{key}` (keys are the long flags of `relay --help` without the \
                 dashes, e.g. `listen = \"127.0.0.1:8080\"`)",
                path.display()
            );
        };
        if let Some((_, why)) = NOT_IN_FILE.iter().find(|(k, _)| k == key) {
            return Err(in_file(key, why));
        }
        let id = arg.get_id().as_str();
        let overridden = |id: &str| {
            matches!(
                given.value_source(id),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
        };
        if overridden(id)
            || command
                .get_arg_conflicts_with(arg)
                .iter()
                .any(|other| overridden(other.get_id().as_str()))
        {
            continue;
        }
        let args = flag_args(key, arg.get_action(), value).map_err(|why| in_file(key, &why))?;
        // Each value on its own, so that a refused one is blamed on its key.
        let mut alone = vec![OsString::from("relay")];
        alone.extend(args.iter().cloned());
        if let Err(e) = command.clone().try_get_matches_from(alone)
            && matches!(
                e.kind(),
                clap::error::ErrorKind::InvalidValue | clap::error::ErrorKind::ValueValidation
            )
        {
            return Err(in_file(key, &one_line(&e)));
        }
        from_file.insert(id.to_owned());
        extra.push(FileArgs { args });
    }
    Ok((extra, from_file))
}

/// The command-line arguments that set flag `key` to the TOML `value`.
fn flag_args(key: &str, action: &ArgAction, value: &toml::Value) -> Result<Vec<OsString>, String> {
    let scalar = |v: &toml::Value| match v {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(n) => Ok(n.to_string()),
        toml::Value::Float(x) => Ok(x.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        _ => Err("expected a string, a number or true/false".to_owned()),
    };
    match action {
        ArgAction::SetTrue => match value {
            toml::Value::Boolean(true) => Ok(vec![format!("--{key}").into()]),
            toml::Value::Boolean(false) => Ok(Vec::new()),
            _ => Err("a switch: true or false".to_owned()),
        },
        ArgAction::Append => {
            let values = match value {
                toml::Value::Array(items) => items.iter().map(scalar).collect::<Result<_, _>>()?,
                other => vec![scalar(other)?],
            };
            Ok(values
                .into_iter()
                .map(|v: String| format!("--{key}={v}").into())
                .collect())
        }
        _ => match value {
            toml::Value::Array(_) => Err("takes one value, not a list".to_owned()),
            other => Ok(vec![format!("--{key}={}", scalar(other)?).into()]),
        },
    }
}

impl Origin {
    /// The effective configuration as TOML, each value with its source; secrets redacted.
    pub(crate) fn render(&self) -> String {
        let mut out = String::from(
            "# relay: effective configuration (a flag beats its environment variable, which \
             beats the file, which beats the default)\n",
        );
        if let Some(file) = &self.file {
            out.push_str(&format!("# configuration file: {}\n", file.display()));
        }
        let command = Cli::command();
        let mut heading = None;
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            let Some(long) = arg.get_long() else {
                continue;
            };
            if matches!(long, "help" | "version" | "check-config" | "config") {
                continue;
            }
            if arg.get_help_heading() != heading {
                heading = arg.get_help_heading();
                out.push_str(&format!("\n# --- {}\n", heading.unwrap_or("Other")));
            }
            let source = if self.from_file.contains(id) {
                "file".to_owned()
            } else {
                match self.matches.value_source(id) {
                    Some(ValueSource::CommandLine) => "flag".to_owned(),
                    Some(ValueSource::EnvVariable) => format!(
                        "env {}",
                        arg.get_env()
                            .map(|e| e.to_string_lossy())
                            .unwrap_or_default()
                    ),
                    Some(ValueSource::DefaultValue) => "default".to_owned(),
                    _ => {
                        out.push_str(&format!("# {long} = (not set)\n"));
                        continue;
                    }
                }
            };
            let raw: Vec<String> = if matches!(arg.get_action(), ArgAction::SetTrue) {
                vec![self.matches.get_flag(id).to_string()]
            } else {
                self.matches
                    .get_raw(id)
                    .into_iter()
                    .flatten()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect()
            };
            if SECRET_FLAGS.contains(&long) {
                out.push_str(&format!("# {long} = <redacted>  # {source}\n"));
                continue;
            }
            let raw: Vec<String> = if long == "postgres" {
                raw.iter().map(|v| redact_database_url(v)).collect()
            } else {
                raw
            };
            let value = toml_value(arg.get_action(), &raw);
            out.push_str(&format!("{long} = {value}  # {source}\n"));
        }
        out.push_str(&environment_notes());
        out
    }
}

/// The PostgreSQL settings read from the environment outside the flags.
fn environment_notes() -> String {
    let mut notes = String::new();
    if let Ok(url) = std::env::var(relay_pg::URL_ENV)
        && !url.is_empty()
    {
        notes.push_str(&format!(
            "# {} = {:?} (used when no --data, --memory or --postgres)\n",
            relay_pg::URL_ENV,
            redact_database_url(&url)
        ));
    }
    if let Some(file) = std::env::var_os(relay_pg::PASSWORD_FILE_ENV) {
        notes.push_str(&format!(
            "# PostgreSQL password: from the file {} ({})\n",
            Path::new(&file).display(),
            relay_pg::PASSWORD_FILE_ENV
        ));
    } else if std::env::var_os(relay_pg::PASSWORD_ENV).is_some() {
        notes.push_str(&format!(
            "# PostgreSQL password: <redacted> ({})\n",
            relay_pg::PASSWORD_ENV
        ));
    }
    if notes.is_empty() {
        notes
    } else {
        format!("\n# --- Environment\n{notes}")
    }
}

/// `values` as a TOML value for a flag of `action`.
fn toml_value(action: &ArgAction, values: &[String]) -> String {
    let one = |v: &str| {
        if v.parse::<i64>().is_ok() || v == "true" || v == "false" {
            v.to_owned()
        } else {
            serde_json::to_string(v).unwrap_or_default()
        }
    };
    match action {
        ArgAction::Append => format!(
            "[{}]",
            values.iter().map(|v| one(v)).collect::<Vec<_>>().join(", ")
        ),
        _ => values.first().map_or_else(|| "\"\"".to_owned(), |v| one(v)),
    }
}

/// A database URL (or libpq `key=value` string) with any password replaced by `***`.
pub(crate) fn redact_database_url(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        if let Some((userinfo, host)) = authority.rsplit_once('@') {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            let hidden = if userinfo.contains(':') { ":***" } else { "" };
            let tail = redact_pairs(tail, '&');
            return format!("{scheme}://{user}{hidden}@{host}{tail}");
        }
        return format!("{scheme}://{authority}{}", redact_pairs(tail, '&'));
    }
    redact_pairs(url, ' ')
}

/// `password=…` in `text`'s `sep`-separated pairs replaced by `password=***`.
fn redact_pairs(text: &str, sep: char) -> String {
    text.split(sep)
        .map(|pair| {
            let key = pair
                .trim_start_matches('?')
                .split('=')
                .next()
                .unwrap_or_default();
            if key.eq_ignore_ascii_case("password") {
                format!("{}=***", &pair[..pair.find('=').unwrap_or(pair.len())])
            } else {
                pair.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(&sep.to_string())
}

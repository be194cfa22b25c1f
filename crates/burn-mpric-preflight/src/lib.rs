//! Whether this machine can give wgpu a Vulkan adapter, and what to do when it cannot, in one
//! line: the reason and the fix. `cargo xtask check` asks before the wgpu tests, and the
//! benchmark suite (`mpric-bench`) before its wgpu rows, so both say the same thing; a crate
//! of its own (the standard library only) so that neither depends on the other.
//!
//! [`Vulkan::probe`] looks where the Vulkan loader looks (Linux only; elsewhere nothing is
//! searched and nothing is reported missing): the loader library, then the driver manifests
//! (ICD files), honouring the loader's environment variables. [`Vulkan::missing`] names what is
//! missing; [`Vulkan::no_adapter`] explains an adapter list that came back empty.

use std::path::{Path, PathBuf};

/// How to get a Vulkan driver on a machine without one.
pub const INSTALL: &str = "install it with `apt-get install -y mesa-vulkan-drivers libvulkan1` (a software driver; your GPU's Vulkan driver works too)";

/// The folders the Vulkan loader reads driver manifests from, before the `XDG_*` and `HOME`
/// ones.
const ICD_DIRS: [&str; 4] = [
    "/etc/vulkan/icd.d",
    "/etc/xdg/vulkan/icd.d",
    "/usr/local/share/vulkan/icd.d",
    "/usr/share/vulkan/icd.d",
];

/// The folders the loader library (`libvulkan.so.1`) is looked for in, before
/// `LD_LIBRARY_PATH` and `/usr/lib/*-linux-gnu`.
const LIB_DIRS: [&str; 6] = [
    "/usr/lib",
    "/usr/lib64",
    "/usr/local/lib",
    "/lib",
    "/lib64",
    "/run/opengl-driver/lib",
];

/// What the Vulkan loader of this machine would find.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vulkan {
    /// Whether the files were looked for (Linux). Elsewhere the fields say nothing.
    pub searched: bool,
    /// Whether the loader library was found.
    pub loader: bool,
    /// The variable that replaces the loader's search with a list of its own
    /// (`VK_DRIVER_FILES`, or the older `VK_ICD_FILENAMES`) and its value, when one is set.
    pub driver_files: Option<(String, String)>,
    /// The driver manifests the loader would read, sorted.
    pub manifests: Vec<PathBuf>,
}

/// What keeps wgpu from a Vulkan adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// No loader library (`libvulkan.so.1`).
    Loader,
    /// No driver manifest where the loader looks; with the variable (and its value) that told
    /// it where to look, when one did.
    Driver {
        /// `VK_DRIVER_FILES` or `VK_ICD_FILENAMES` and its value, if set.
        listed_by: Option<(String, String)>,
    },
    /// Drivers are installed (their manifests' file names) but wgpu got no adapter from them.
    Adapter {
        /// The manifests' file names; empty where nothing was searched.
        drivers: Vec<String>,
    },
}

impl Missing {
    /// The one-line reason and fix, for `needed_by` (what needs the adapter, plural: "the
    /// wgpu tests").
    pub fn message(&self, needed_by: &str) -> String {
        match self {
            Missing::Loader => format!(
                "no Vulkan loader (libvulkan.so.1) on this machine, and {needed_by} need one: {INSTALL}"
            ),
            Missing::Driver { listed_by: None } => format!(
                "no Vulkan driver on this machine (no ICD manifest in /etc/vulkan/icd.d or /usr/share/vulkan/icd.d), and {needed_by} need one: {INSTALL}"
            ),
            Missing::Driver {
                listed_by: Some((var, value)),
            } => format!(
                "no Vulkan driver: {var}={value} names no driver manifest that exists, and {needed_by} need one: unset {var} or point it at a manifest (such as /usr/share/vulkan/icd.d/lvp_icd.x86_64.json), or {INSTALL}"
            ),
            Missing::Adapter { drivers } if drivers.is_empty() => format!(
                "wgpu found no GPU adapter (Vulkan, Metal or DX12), and {needed_by} need one: install the GPU's driver"
            ),
            Missing::Adapter { drivers } => format!(
                "wgpu found no Vulkan adapter although drivers are installed ({}), and {needed_by} need one: check that the driver loads (`vulkaninfo --summary`), or {INSTALL}",
                drivers.join(", ")
            ),
        }
    }
}

impl Vulkan {
    /// Looks for the loader and the driver manifests the way the loader does (Linux; elsewhere
    /// nothing is searched).
    pub fn probe() -> Vulkan {
        if cfg!(target_os = "linux") {
            Self::search(|var| std::env::var(var).ok())
        } else {
            Vulkan::default()
        }
    }

    /// [`probe`](Self::probe) with the environment read through `env`.
    fn search(env: impl Fn(&str) -> Option<String>) -> Vulkan {
        let mut lib_dirs: Vec<PathBuf> = LIB_DIRS.iter().map(Into::into).collect();
        if let Some(paths) = env("LD_LIBRARY_PATH") {
            lib_dirs.extend(paths.split(':').filter(|p| !p.is_empty()).map(Into::into));
        }
        if let Ok(entries) = std::fs::read_dir("/usr/lib") {
            lib_dirs.extend(entries.flatten().map(|e| e.path()).filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().ends_with("-linux-gnu"))
            }));
        }
        let loader = lib_dirs.iter().any(|d| d.join("libvulkan.so.1").exists());

        // The loader's own order: an explicit list replaces its search; VK_ADD_DRIVER_FILES
        // adds to the search.
        let driver_files = ["VK_DRIVER_FILES", "VK_ICD_FILENAMES"]
            .into_iter()
            .find_map(|var| Some((var.to_string(), env(var).filter(|v| !v.is_empty())?)));
        let mut manifests = Vec::new();
        match &driver_files {
            Some((_, files)) => manifests_in_list(files, &mut manifests),
            None => {
                let mut dirs: Vec<PathBuf> = ICD_DIRS.iter().map(Into::into).collect();
                for var in ["XDG_CONFIG_DIRS", "XDG_DATA_DIRS"] {
                    if let Some(value) = env(var) {
                        dirs.extend(
                            value
                                .split(':')
                                .filter(|d| !d.is_empty())
                                .map(|d| Path::new(d).join("vulkan/icd.d")),
                        );
                    }
                }
                if let Some(home) = env("HOME") {
                    dirs.push(Path::new(&home).join(".local/share/vulkan/icd.d"));
                }
                for dir in dirs {
                    manifests_in(&dir, &mut manifests);
                }
                if let Some(files) = env("VK_ADD_DRIVER_FILES") {
                    manifests_in_list(&files, &mut manifests);
                }
            }
        }
        manifests.sort();
        manifests.dedup();
        Vulkan {
            searched: true,
            loader,
            driver_files,
            manifests,
        }
    }

    /// What is missing for a Vulkan adapter, as far as files tell: `None` when the loader and
    /// at least one driver are there (or nothing was searched).
    pub fn missing(&self) -> Option<Missing> {
        if !self.searched {
            None
        } else if !self.loader {
            Some(Missing::Loader)
        } else if self.manifests.is_empty() {
            Some(Missing::Driver {
                listed_by: self.driver_files.clone(),
            })
        } else {
            None
        }
    }

    /// Why wgpu listed no adapter on this machine: what [`missing`](Self::missing) names, or
    /// else drivers that gave no adapter.
    pub fn no_adapter(&self) -> Missing {
        self.missing().unwrap_or_else(|| Missing::Adapter {
            drivers: self.driver_names(),
        })
    }

    /// The file names of the driver manifests found.
    pub fn driver_names(&self) -> Vec<String> {
        self.manifests
            .iter()
            .filter_map(|m| Some(m.file_name()?.to_string_lossy().into_owned()))
            .collect()
    }
}

/// The `.json` manifests in `dir`.
fn manifests_in(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        out.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json") && p.is_file()),
        );
    }
}

/// The manifests a `:`-separated list names: files that exist, and the manifests in folders.
fn manifests_in_list(list: &str, out: &mut Vec<PathBuf>) {
    for entry in list.split(':').filter(|e| !e.is_empty()).map(Path::new) {
        if entry.is_dir() {
            manifests_in(entry, out);
        } else if entry.is_file() {
            out.push(entry.to_path_buf());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WHO: &str = "the wgpu tests";

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-vulkan-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn every_message_is_one_line_with_a_fix() {
        let cases = [
            Missing::Loader,
            Missing::Driver { listed_by: None },
            Missing::Driver {
                listed_by: Some(("VK_ICD_FILENAMES".into(), "/nonexistent".into())),
            },
            Missing::Adapter { drivers: vec![] },
            Missing::Adapter {
                drivers: vec!["lvp_icd.x86_64.json".into()],
            },
        ];
        for missing in cases {
            let message = missing.message(WHO);
            assert!(!message.contains('\n'), "{message}");
            assert!(message.contains("the wgpu tests need one: "), "{message}");
            assert!(message.contains("install"), "{message}");
        }
        assert!(Missing::Loader.message(WHO).contains("libvulkan.so.1"));
        assert!(
            Missing::Driver { listed_by: None }
                .message(WHO)
                .contains("mesa-vulkan-drivers")
        );
    }

    #[test]
    fn nothing_is_missing_where_nothing_was_searched() {
        let elsewhere = Vulkan::default();
        assert_eq!(elsewhere.missing(), None);
        assert_eq!(elsewhere.no_adapter(), Missing::Adapter { drivers: vec![] });
    }

    #[test]
    fn no_adapters_are_explained_by_what_the_files_lack() {
        let found = Vulkan {
            searched: true,
            loader: true,
            driver_files: None,
            manifests: vec!["/usr/share/vulkan/icd.d/lvp_icd.x86_64.json".into()],
        };
        assert_eq!(found.missing(), None);
        let message = found.no_adapter().message("the wgpu rows");
        assert!(
            message.contains("drivers are installed (lvp_icd.x86_64.json)"),
            "{message}"
        );
        assert!(message.contains("the wgpu rows need one"), "{message}");

        let no_loader = Vulkan {
            loader: false,
            ..found.clone()
        };
        assert_eq!(no_loader.no_adapter(), Missing::Loader);

        let no_driver = Vulkan {
            manifests: vec![],
            ..found
        };
        assert_eq!(no_driver.no_adapter(), Missing::Driver { listed_by: None });
    }

    #[test]
    fn an_explicit_driver_list_replaces_the_search() {
        let dir = temp_dir("list");
        let manifest = dir.join("my_icd.json");
        std::fs::write(&manifest, "{}").unwrap();
        std::fs::write(dir.join("notes.txt"), "").unwrap();

        // A list of files that do not exist: no driver, whatever the folders hold.
        let env = |var: &str| (var == "VK_ICD_FILENAMES").then(|| "/nonexistent".to_string());
        let vulkan = Vulkan::search(env);
        assert!(vulkan.manifests.is_empty(), "{vulkan:?}");
        if vulkan.loader {
            let message = vulkan.no_adapter().message(WHO);
            assert!(
                message.starts_with("no Vulkan driver: VK_ICD_FILENAMES=/nonexistent"),
                "{message}"
            );
        }

        // VK_DRIVER_FILES wins over VK_ICD_FILENAMES; a folder in the list counts its manifests.
        let listed = format!("/nonexistent:{}", dir.display());
        let env = |var: &str| match var {
            "VK_DRIVER_FILES" => Some(listed.clone()),
            "VK_ICD_FILENAMES" => Some("/nonexistent".into()),
            _ => None,
        };
        let vulkan = Vulkan::search(env);
        assert_eq!(vulkan.manifests, std::slice::from_ref(&manifest));
        assert_eq!(vulkan.driver_names(), ["my_icd.json"]);
        assert_eq!(vulkan.driver_files.unwrap().0, "VK_DRIVER_FILES");

        // Without a list, VK_ADD_DRIVER_FILES adds to the search.
        let added = manifest.display().to_string();
        let env = |var: &str| (var == "VK_ADD_DRIVER_FILES").then(|| added.clone());
        assert!(Vulkan::search(env).manifests.contains(&manifest));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_loader_is_found_on_the_library_path() {
        let dir = temp_dir("lib");
        let path = dir.display().to_string();
        std::fs::write(dir.join("libvulkan.so.1"), "").unwrap();
        let env = |var: &str| (var == "LD_LIBRARY_PATH").then(|| path.clone());
        assert!(Vulkan::search(env).loader);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

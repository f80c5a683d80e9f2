# Put a Quarto CLI on PATH for the tests and the main job. Source it from bash:
#   source scripts/quarto.sh
# A `quarto` already on PATH (from quarto.org or conda's quarto package) is used as it is.
# Otherwise, when the offline installer of the Quarto CLI is there (../shared/tools/quarto, or
# $CFBOOK_QUARTO_INSTALLER), it installs Quarto once into .cache/quarto-<version> (git-ignored;
# needs npm) and puts it on PATH. If neither works it says why and leaves PATH alone:
# the site is then built with nbconvert, and the Quarto tests skip (on CI they fail instead).

cfbook_quarto() {
    local root installer version dest
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    if command -v quarto >/dev/null 2>&1; then
        echo "Quarto $(quarto --version) found at $(command -v quarto)"
        return 0
    fi
    installer="${CFBOOK_QUARTO_INSTALLER:-$root/../shared/tools/quarto}"
    if [ ! -f "$installer/install.sh" ]; then
        echo "Quarto is not on PATH and there is no $installer/install.sh:" \
             "the site will be built with nbconvert (the README says how to get Quarto)" >&2
        return 0
    fi
    version="$(sed -n 's/^QUARTO_VERSION=//p' "$installer/install.sh")"
    dest="$root/.cache/quarto-${version:-unknown}"
    [ -x "$dest/bin/quarto" ] || echo "Installing Quarto $version from $installer into $dest ..."
    mkdir -p "$dest"
    # On a finished install the installer only checks it and prints the version.
    if ! bash "$installer/install.sh" "$dest" >"$dest.log" 2>&1; then
        tail -n 20 "$dest.log" >&2
        echo "Installing Quarto failed (full log: $dest.log): the site will be built with" \
             "nbconvert" >&2
        return 0
    fi
    export PATH="$dest/bin:$PATH"
    echo "Quarto $(quarto --version) from $dest"
}

cfbook_quarto

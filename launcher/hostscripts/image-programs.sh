# Run inside a unit's image by the preflight host probe (docker run --rm --network none
# --entrypoint sh IMAGE -c <this> image-programs PROGRAM...): prints "missing PROGRAM" for each
# PROGRAM the image lacks, then "checked".  A PROGRAM is a command on the image's PATH (what
# docker runs as the unit's --entrypoint), or "python3 -m PKG.MOD": found when the image's
# python3 finds the top-level package PKG (located, not imported: an engine's import is slow).
for p in "$@"; do
    case $p in
        "python3 -m "*)
            m=${p#python3 -m }
            python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)' \
                "${m%%.*}" >/dev/null 2>&1 || echo "missing $p" ;;
        *)
            command -v "$p" >/dev/null 2>&1 || echo "missing $p" ;;
    esac
done
echo checked

#!/bin/sh
# Re-vendors the API reference's renderer at the pinned versions, from the npm registry:
#
#	go generate ./api/apidocs   (or: sh api/apidocs/vendor.sh)
#
# To upgrade, change a version below, run it, and run the api's tests (the browser test
# fails when the new bundle needs more than the page's Content-Security-Policy allows).
#
# Stoplight Elements' web-component bundle renders the document; its styles are a separate
# stylesheet, so it runs under style-src 'self'. The one thing it would inject is Font
# Awesome's stylesheet: the page turns that off (data-auto-add-css="false") and links the
# same CSS from the Font Awesome release the bundle is built with (its LICENSE.txt names
# it: keep the two in step).
set -eu

ELEMENTS=9.0.25    # @stoplight/elements, Apache-2.0
FONTAWESOME=6.1.1  # @fortawesome/fontawesome-svg-core, MIT

cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# npm pack checks each tarball against the registry's integrity hash.
(cd "$tmp" && npm pack --silent "@stoplight/elements@$ELEMENTS" "@fortawesome/fontawesome-svg-core@$FONTAWESOME" >/dev/null)
mkdir "$tmp/elements" "$tmp/fontawesome"
tar -xzf "$tmp/stoplight-elements-$ELEMENTS.tgz" -C "$tmp/elements"
tar -xzf "$tmp/fortawesome-fontawesome-svg-core-$FONTAWESOME.tgz" -C "$tmp/fontawesome"

if ! grep -q "Font Awesome Free $FONTAWESOME " "$tmp/elements/package/web-components.min.js.LICENSE.txt"; then
	echo "vendor.sh: Elements $ELEMENTS does not bundle Font Awesome $FONTAWESOME: set FONTAWESOME to the version its web-components.min.js.LICENSE.txt names" >&2
	exit 1
fi

rm -rf elements fontawesome
mkdir elements fontawesome
for f in web-components.min.js web-components.min.js.LICENSE.txt styles.min.css LICENSE; do
	cp "$tmp/elements/package/$f" elements/
done
cp "$tmp/fontawesome/package/styles.css" "$tmp/fontawesome/package/LICENSE.txt" fontawesome/
printf '%s\n' "$ELEMENTS" >elements/VERSION
printf '%s\n' "$FONTAWESOME" >fontawesome/VERSION

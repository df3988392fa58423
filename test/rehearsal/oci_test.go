//go:build rehearsal

// oci_test.go: the reconciler's image as the release lays it out, a registry on loopback that serves
// it under a tag, another repository's tag and its digest, and a pull of a reference as a container
// runtime pulls it (by digest when the reference has one, every blob checked against its digest).
// The image protocol is the OCI distribution and image specifications
// (github.com/opencontainers/distribution-spec spec.md: GET /v2/NAME/manifests/REFERENCE and
// /v2/NAME/blobs/DIGEST, the Docker-Content-Digest header; image-spec manifest.md and config.md).
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int    `json:"size"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

// imageConfig is the part of an image's configuration a runtime starts the container from.
type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		Entrypoint []string `json:"Entrypoint"`
		Cmd        []string `json:"Cmd,omitempty"`
		User       string   `json:"User"`
		Env        []string `json:"Env"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

func digestOf(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }

// registry is a read-only OCI registry: blobs by digest, manifests by digest and by repository tag.
type registry struct {
	mu    sync.Mutex
	blobs map[string][]byte
	tags  map[string]string // "repository:tag" -> manifest digest
}

// koImage adds the image ko builds from the release's binary (.goreleaser.yml kos: the binary at
// /ko-app/runnerpool, the entrypoint, uid 65532) and tags it; its distroless base, which this
// machine cannot fetch, is left out (the binary is static). It returns the manifest's digest.
func (r *registry) koImage(t *testing.T, binary []byte, arch string, tags ...string) string {
	t.Helper()
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	for _, h := range []*tar.Header{
		{Name: "ko-app/", Mode: 0o755, Typeflag: tar.TypeDir},
		{Name: "ko-app/runnerpool", Mode: 0o755, Size: int64(len(binary)), Typeflag: tar.TypeReg},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tw.Write(binary); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(tarBuf.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	var cfg imageConfig
	cfg.Architecture, cfg.OS = arch, "linux"
	cfg.Config.Entrypoint = []string{"/ko-app/runnerpool"}
	cfg.Config.User = "65532:65532"
	cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "KO_DATA_PATH=/var/run/ko"}
	cfg.RootFS.Type, cfg.RootFS.DiffIDs = "layers", []string{digestOf(tarBuf.Bytes())}
	cfgJSON, _ := json.Marshal(cfg)
	m := manifest{SchemaVersion: 2, MediaType: mediaManifest,
		Config: descriptor{mediaConfig, digestOf(cfgJSON), len(cfgJSON)},
		Layers: []descriptor{{mediaLayer, digestOf(gz.Bytes()), gz.Len()}}}
	mJSON, _ := json.Marshal(m)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.blobs == nil {
		r.blobs, r.tags = map[string][]byte{}, map[string]string{}
	}
	for _, b := range [][]byte{gz.Bytes(), cfgJSON, mJSON} {
		r.blobs[digestOf(b)] = b
	}
	for _, tag := range tags {
		r.tags[tag] = digestOf(mJSON)
	}
	return digestOf(mJSON)
}

func (r *registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	p := req.URL.Path
	if p == "/v2/" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := strings.LastIndex(p, "/manifests/"); strings.HasPrefix(p, "/v2/") && i > 0 {
		name, ref := p[len("/v2/"):i], p[i+len("/manifests/"):]
		d := ref
		if !strings.HasPrefix(ref, "sha256:") {
			d = r.tags[name+":"+ref]
		}
		b, ok := r.blobs[d]
		if !ok {
			http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN"}]}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", mediaManifest)
		w.Header().Set("Docker-Content-Digest", d)
		_, _ = w.Write(b)
		return
	}
	if i := strings.LastIndex(p, "/blobs/"); strings.HasPrefix(p, "/v2/") && i > 0 {
		if b, ok := r.blobs[p[i+len("/blobs/"):]]; ok {
			_, _ = w.Write(b)
			return
		}
	}
	http.Error(w, `{"errors":[{"code":"BLOB_UNKNOWN"}]}`, http.StatusNotFound)
}

// pull fetches ref (REGISTRY/REPOSITORY[:TAG][@DIGEST]) from the registry at base as a runtime
// does: by digest when the reference has one (the tag is then not consulted), every blob checked
// against its digest, the layers unpacked into a root file system. It returns the root and the
// image's configuration.
func pull(t *testing.T, base, ref string) (string, imageConfig) {
	t.Helper()
	name, digest, _ := strings.Cut(ref, "@")
	host, repoTag, ok := strings.Cut(name, "/")
	if !ok {
		t.Fatalf("%s: no registry host", ref)
	}
	repo, tag := repoTag, ""
	if i := strings.LastIndex(repoTag, ":"); i > strings.LastIndex(repoTag, "/") {
		repo, tag = repoTag[:i], repoTag[i+1:]
	}
	if !strings.HasSuffix(base, "://"+host) {
		t.Fatalf("%s: registry %s is not the rehearsal's %s", ref, host, base)
	}
	get := func(path, want string) []byte {
		resp, err := http.Get(base + "/v2/" + repo + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s%s: %d %s %v", repo, path, resp.StatusCode, b, err)
		}
		if want != "" && digestOf(b) != want {
			t.Fatalf("GET %s%s: digest %s, want %s", repo, path, digestOf(b), want)
		}
		return b
	}
	var mJSON []byte
	if digest != "" {
		mJSON = get("/manifests/"+digest, digest)
	} else if tag != "" {
		mJSON = get("/manifests/"+tag, "")
	} else {
		t.Fatalf("%s: neither tag nor digest", ref)
	}
	var m manifest
	if err := json.Unmarshal(mJSON, &m); err != nil || m.MediaType != mediaManifest {
		t.Fatalf("%s: manifest %s: %v", ref, mJSON, err)
	}
	var cfg imageConfig
	if err := json.Unmarshal(get("/blobs/"+m.Config.Digest, m.Config.Digest), &cfg); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, l := range m.Layers {
		zr, err := gzip.NewReader(bytes.NewReader(get("/blobs/"+l.Digest, l.Digest)))
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(root, filepath.Clean("/"+h.Name))
			switch h.Typeflag {
			case tar.TypeDir:
				err = os.MkdirAll(p, 0o755)
			case tar.TypeReg:
				var b []byte
				if b, err = io.ReadAll(tr); err == nil {
					err = os.WriteFile(p, b, os.FileMode(h.Mode)&0o777)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return root, cfg
}

// Command barewebhook is the Go floor of `make bench-e2e`: a bare net/http admission
// webhook that parses the AdmissionReview (encoding/json), and answers every request with
// the same fixed JSON patch, base64 as AdmissionReview v1 carries it. No engine, no logs,
// no metrics: what any webhook in Go pays on the API server's path.
//
// HTTP/1.1 only, as our aiohttp server speaks: the rows then differ by the language, not by
// the protocol. Prints `listening: URL` once bound (port 0 allowed).
package main

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
)

const maxBody = 4 << 20 // as the webhook's DEFAULT_MAX_BODY_BYTES

type review struct {
	Request struct {
		UID string `json:"uid"`
	} `json:"request"`
}

type response struct {
	UID       string `json:"uid"`
	Allowed   bool   `json:"allowed"`
	PatchType string `json:"patchType,omitempty"`
	Patch     string `json:"patch,omitempty"`
}

type answer struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Response   response `json:"response"`
}

func mutate(patch string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
		var in review
		if err == nil {
			err = json.Unmarshal(body, &in)
		}
		if err != nil || in.Request.UID == "" {
			http.Error(w, "malformed AdmissionReview", http.StatusBadRequest)
			return
		}
		out := answer{"admission.k8s.io/v1", "AdmissionReview", response{UID: in.Request.UID, Allowed: true}}
		if patch != "" {
			out.Response.PatchType, out.Response.Patch = "JSONPatch", patch
		}
		raw, err := json.Marshal(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(raw)
	}
}

func main() {
	cert := flag.String("tls-cert", "", "PEM certificate")
	key := flag.String("tls-key", "", "PEM private key")
	host := flag.String("host", "0.0.0.0", "address to listen on")
	port := flag.Int("port", 8443, "port (0: any free one)")
	patchFile := flag.String("patch-file", "", "the JSON patch to answer with (empty: allow unchanged)")
	flag.Parse()
	patch := ""
	if *patchFile != "" {
		raw, err := os.ReadFile(*patchFile)
		if err != nil {
			log.Fatalf("--patch-file: %v", err)
		}
		patch = base64.StdEncoding.EncodeToString(raw)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /mutate", mutate(patch))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, fmt.Sprint(*port)))
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{
		Handler:   mux,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12},
		// A non-nil empty map turns HTTP/2 off.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	shown := *host
	if shown == "0.0.0.0" {
		shown = "127.0.0.1"
	}
	fmt.Printf("listening: https://%s/mutate\n", net.JoinHostPort(shown, fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)))
	log.Fatal(srv.ServeTLS(ln, *cert, *key))
}

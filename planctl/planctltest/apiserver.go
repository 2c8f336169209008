// Package planctltest is a stand-in for the Kubernetes API server, for the tests of planctl and
// of the commands built on it. It answers over real HTTP the discovery a controller-runtime client
// runs and the reads and writes of the kinds the commands use (nodes, config maps, UpgradePlans,
// Versions, RepoNodes), keeping the objects as JSON in memory with resource versions, Conflicts,
// AlreadyExists and delete preconditions as the API server has them. It does not watch, patch or
// validate.
//
// Its point is to go away and come back as a restarting API server does: Stop closes its
// listener and connections (connection refused), Restart listens again on the same address,
// Freeze holds every request unanswered until Thaw (a frozen container), FailNext answers with
// an error status, and LoseAnswers carries out writes and drops the connection before the answer.
//
// Imports: api and controller-runtime's fake client.
package planctltest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// resource is a kind the server serves.
type resource struct {
	gv         schema.GroupVersion
	name, kind string
	namespaced bool
}

var resources = []resource{
	{gv: schema.GroupVersion{Version: "v1"}, name: "nodes", kind: "Node"},
	{gv: schema.GroupVersion{Version: "v1"}, name: "configmaps", kind: "ConfigMap", namespaced: true},
	{gv: v1beta1.GroupVersion, name: "upgradeplans", kind: "UpgradePlan"},
	{gv: v1beta1.GroupVersion, name: "versions", kind: "Version"},
	{gv: v1beta1.GroupVersion, name: "reponodes", kind: "RepoNode"},
}

// APIServer is the stand-in. Its methods are safe for concurrent use.
type APIServer struct {
	t      testing.TB
	addr   string
	scheme *runtime.Scheme

	mu          sync.Mutex
	srv         *http.Server
	objs        map[string]map[string]any // by objectPath
	rv          int
	frozen      chan struct{} // closed by Thaw; nil when not frozen
	fail        []failure
	loseAnswers int
	conflicts   int
	requests    int
}

// failure is an answer FailNext queued.
type failure struct {
	code    int
	message string
}

// Start starts a server on a free port of 127.0.0.1 holding objs; it is stopped when the test
// ends.
func Start(t testing.TB, objs ...client.Object) *APIServer {
	t.Helper()
	s := &APIServer{t: t, objs: map[string]map[string]any{}, scheme: runtime.NewScheme()}
	if err := clientgoscheme.AddToScheme(s.scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1beta1.AddToScheme(s.scheme); err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		s.Put(o)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	s.serve(l)
	t.Cleanup(func() {
		s.Thaw()
		s.Stop()
	})
	return s
}

func (s *APIServer) serve(l net.Listener) {
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
}

// URL is the server's base URL.
func (s *APIServer) URL() string { return "http://" + s.addr }

// Config is a client configuration for the server.
func (s *APIServer) Config() *rest.Config { return &rest.Config{Host: s.URL()} }

// Kubeconfig writes a kubeconfig file for the server into a temporary directory of the test and
// returns its path.
func (s *APIServer) Kubeconfig() string {
	p := filepath.Join(s.t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: stub, cluster: {server: %q}}]
users: [{name: stub, user: {}}]
contexts: [{name: stub, context: {cluster: stub, user: stub}}]
current-context: stub
`, s.URL())
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		s.t.Fatal(err)
	}
	return p
}

// Stop closes the listener and every connection: the server refuses connections until
// Restart.
func (s *APIServer) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// Restart listens again on the server's address.
func (s *APIServer) Restart() {
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Errorf("listen again on %s: %v", s.addr, err)
		return
	}
	s.serve(l)
}

// Freeze holds every request from now on unanswered until Thaw, as a frozen API server does.
func (s *APIServer) Freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frozen == nil {
		s.frozen = make(chan struct{})
	}
}

// Thaw answers the requests Freeze held.
func (s *APIServer) Thaw() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frozen != nil {
		close(s.frozen)
		s.frozen = nil
	}
}

// FailNext answers the next n requests for objects (not discovery) with code and message.
func (s *APIServer) FailNext(n, code int, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.fail = append(s.fail, failure{code: code, message: message})
	}
}

// LoseAnswers carries out the next n writes (create, update, delete) and closes their
// connections before answering, as an API server that goes away just after a write landed.
func (s *APIServer) LoseAnswers(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loseAnswers = n
}

// ConflictNext makes the next n updates meet a Conflict, as another writer's update of the same
// object just before each would.
func (s *APIServer) ConflictNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conflicts = n
}

// Requests counts the requests for objects the server answered or failed.
func (s *APIServer) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Put stores obj as it is, with a new resource version.
func (s *APIServer) Put(obj client.Object) {
	gvk, err := apiutil.GVKForObject(obj, s.scheme)
	if err != nil {
		s.t.Fatal(err)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		s.t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		s.t.Fatal(err)
	}
	m["apiVersion"], m["kind"] = gvk.GroupVersion().String(), gvk.Kind
	r := s.byKind(gvk.Kind)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	meta := m["metadata"].(map[string]any)
	meta["resourceVersion"] = strconv.Itoa(s.rv)
	if meta["uid"] == nil {
		meta["uid"] = fmt.Sprintf("uid-%d", s.rv)
	}
	s.objs[objectPath(r, obj.GetNamespace(), obj.GetName())] = m
}

// Get reads the stored object of obj's kind and key into obj; false when there is none.
func (s *APIServer) Get(key client.ObjectKey, obj client.Object) bool {
	gvk, err := apiutil.GVKForObject(obj, s.scheme)
	if err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	m, ok := s.objs[objectPath(s.byKind(gvk.Kind), key.Namespace, key.Name)]
	var b []byte
	if ok {
		b, err = json.Marshal(m)
	}
	s.mu.Unlock()
	if !ok {
		return false
	}
	if err == nil {
		err = json.Unmarshal(b, obj)
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return true
}

func (s *APIServer) byKind(kind string) resource {
	for _, r := range resources {
		if r.kind == kind {
			return r
		}
	}
	s.t.Fatalf("planctltest serves no %s", kind)
	return resource{}
}

func objectPath(r resource, ns, name string) string {
	return strings.Join([]string{r.gv.String(), ns, r.name, name}, "|")
}

// ServeHTTP implements http.Handler.
func (s *APIServer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	frozen := s.frozen
	s.mu.Unlock()
	if frozen != nil {
		select {
		case <-frozen:
		case <-req.Context().Done():
			return
		}
	}
	if s.discovery(w, req) {
		return
	}
	r, ns, name, ok := parsePath(req.URL.Path)
	if !ok {
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{}, req.URL.Path))
		return
	}
	s.mu.Lock()
	s.requests++
	if len(s.fail) > 0 {
		f := s.fail[0]
		s.fail = s.fail[1:]
		s.mu.Unlock()
		writeStatus(w, apierrors.NewGenericServerResponse(f.code, strings.ToLower(req.Method), r.gr(), name, f.message, 0, true))
		return
	}
	s.mu.Unlock()
	if req.URL.Query().Get("watch") == "true" {
		writeStatus(w, apierrors.NewMethodNotSupported(r.gr(), "watch"))
		return
	}
	var code int
	var body any
	switch {
	case req.Method == http.MethodGet && name == "":
		code, body = s.list(r, ns)
	case req.Method == http.MethodGet:
		code, body = s.get(r, ns, name)
	case req.Method == http.MethodPost && name == "":
		code, body = s.write(req, r, ns, "", true)
	case req.Method == http.MethodPut && name != "":
		code, body = s.write(req, r, ns, name, false)
	case req.Method == http.MethodDelete && name != "":
		code, body = s.delete(req, r, ns, name)
	default:
		writeStatus(w, apierrors.NewMethodNotSupported(r.gr(), req.Method))
		return
	}
	if req.Method != http.MethodGet && code < 300 {
		s.mu.Lock()
		lose := s.loseAnswers > 0
		if lose {
			s.loseAnswers--
		}
		s.mu.Unlock()
		if lose {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
	}
	if st, isStatus := body.(*apierrors.StatusError); isStatus {
		writeStatus(w, st)
		return
	}
	writeJSON(w, code, body)
}

func (r resource) gr() schema.GroupResource {
	return schema.GroupResource{Group: r.gv.Group, Resource: r.name}
}

// parsePath reads /api/v1/[namespaces/NS/]RESOURCE[/NAME] and
// /apis/GROUP/VERSION/[namespaces/NS/]RESOURCE[/NAME].
func parsePath(p string) (r resource, ns, name string, ok bool) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	var gv schema.GroupVersion
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		gv, parts = schema.GroupVersion{Version: parts[1]}, parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		gv, parts = schema.GroupVersion{Group: parts[1], Version: parts[2]}, parts[3:]
	default:
		return r, "", "", false
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		ns, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 || len(parts) > 2 {
		return r, "", "", false
	}
	for _, c := range resources {
		if c.gv == gv && c.name == parts[0] && (ns == "" || c.namespaced) {
			if len(parts) == 2 {
				name = parts[1]
			}
			return c, ns, name, true
		}
	}
	return r, "", "", false
}

func (s *APIServer) list(r resource, ns string) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	items := []any{}
	for k, o := range s.objs {
		f := strings.Split(k, "|")
		if f[0] == r.gv.String() && f[2] == r.name && (ns == "" || f[1] == ns) {
			items = append(items, o)
		}
	}
	return http.StatusOK, map[string]any{
		"apiVersion": r.gv.String(), "kind": r.kind + "List",
		"metadata": map[string]any{"resourceVersion": strconv.Itoa(s.rv)}, "items": items,
	}
}

func (s *APIServer) get(r resource, ns, name string) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[objectPath(r, ns, name)]
	if !ok {
		return 0, apierrors.NewNotFound(r.gr(), name)
	}
	return http.StatusOK, o
}

func (s *APIServer) write(req *http.Request, r resource, ns, name string, create bool) (int, any) {
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return 0, apierrors.NewBadRequest(err.Error())
	}
	var o map[string]any
	if err := json.Unmarshal(b, &o); err != nil {
		return 0, apierrors.NewBadRequest(err.Error())
	}
	meta, _ := o["metadata"].(map[string]any)
	if meta == nil {
		return 0, apierrors.NewBadRequest("no metadata")
	}
	if create {
		name, _ = meta["name"].(string)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := objectPath(r, ns, name)
	cur, exists := s.objs[key]
	if !create && exists && s.conflicts > 0 {
		s.conflicts--
		s.rv++
		cur["metadata"].(map[string]any)["resourceVersion"] = strconv.Itoa(s.rv)
	}
	switch {
	case create && exists:
		return 0, apierrors.NewAlreadyExists(r.gr(), name)
	case !create && !exists:
		return 0, apierrors.NewNotFound(r.gr(), name)
	case !create && meta["resourceVersion"] != cur["metadata"].(map[string]any)["resourceVersion"]:
		return 0, apierrors.NewConflict(r.gr(), name, fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	s.rv++
	meta["resourceVersion"] = strconv.Itoa(s.rv)
	if create {
		meta["uid"] = fmt.Sprintf("uid-%d", s.rv)
		meta["creationTimestamp"] = time.Now().UTC().Format(time.RFC3339)
	} else {
		cm := cur["metadata"].(map[string]any)
		meta["uid"], meta["creationTimestamp"] = cm["uid"], cm["creationTimestamp"]
		// The status is the sequencer's, written through its subresource: an update of the
		// object leaves it.
		if st, ok := cur["status"]; ok {
			o["status"] = st
		} else {
			delete(o, "status")
		}
	}
	o["apiVersion"], o["kind"] = r.gv.String(), r.kind
	s.objs[key] = o
	if create {
		return http.StatusCreated, o
	}
	return http.StatusOK, o
}

func (s *APIServer) delete(req *http.Request, r resource, ns, name string) (int, any) {
	var opts metav1.DeleteOptions
	if b, err := io.ReadAll(req.Body); err == nil && len(b) > 0 {
		if err := json.Unmarshal(b, &opts); err != nil {
			return 0, apierrors.NewBadRequest(err.Error())
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := objectPath(r, ns, name)
	cur, ok := s.objs[key]
	if !ok {
		return 0, apierrors.NewNotFound(r.gr(), name)
	}
	if p := opts.Preconditions; p != nil && p.UID != nil && string(*p.UID) != cur["metadata"].(map[string]any)["uid"] {
		return 0, apierrors.NewConflict(r.gr(), name, fmt.Errorf("the UID in the precondition (%s) does not match", *p.UID))
	}
	delete(s.objs, key)
	s.rv++
	return http.StatusOK, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess}
}

// discovery answers the discovery documents; false when the request is not one.
func (s *APIServer) discovery(w http.ResponseWriter, req *http.Request) bool {
	if req.Method != http.MethodGet {
		return false
	}
	switch p := strings.TrimSuffix(req.URL.Path, "/"); p {
	case "/version":
		writeJSON(w, http.StatusOK, map[string]string{"gitVersion": "v1.33.3", "major": "1", "minor": "33"})
	case "/api":
		writeJSON(w, http.StatusOK, metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}})
	case "/apis":
		gvd := metav1.GroupVersionForDiscovery{GroupVersion: v1beta1.GroupVersion.String(), Version: v1beta1.GroupVersion.Version}
		writeJSON(w, http.StatusOK, metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
			Groups: []metav1.APIGroup{{Name: v1beta1.GroupVersion.Group, Versions: []metav1.GroupVersionForDiscovery{gvd}, PreferredVersion: gvd}}})
	case "/api/v1", "/apis/" + v1beta1.GroupVersion.String():
		gv := strings.TrimPrefix(strings.TrimPrefix(p, "/apis/"), "/api/")
		l := metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv}
		for _, r := range resources {
			if r.gv.String() == gv {
				l.APIResources = append(l.APIResources, metav1.APIResource{Name: r.name, Kind: r.kind, Namespaced: r.namespaced,
					Verbs: metav1.Verbs{"get", "list", "create", "update", "delete"}})
			}
		}
		writeJSON(w, http.StatusOK, l)
	default:
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, body any) {
	b, err := json.Marshal(body)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":500}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.ErrStatus
	st.Kind, st.APIVersion = "Status", "v1"
	writeJSON(w, int(st.Code), st)
}

package main

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/kubeclient"
)

// TestSequencerCacheMatchesRoles checks the sequencer's informers against the RBAC controller-gen
// generated from its markers: an informer lists and watches its kind in the namespaces it is
// given, and fails for good when a Role does not allow it there; a Role that allows listing and
// watching a kind nothing caches grants more than the code needs.
func TestSequencerCacheMatchesRoles(t *testing.T) {
	t.Parallel()
	s, err := kubeclient.Scheme()
	require.NoError(t, err)
	roles := generatedRoles(t, "../../manifests/rbac/sequencer/role.yaml")
	// The namespaces the markers name stand for these (the chart maps them the same way).
	const own, product = "own-ns", "product-ns"
	stands := map[string]string{own: "upgrade-repo-system", product: "harvester-system"}
	cached := map[string][]schema.GroupResource{} // marker namespace -> what is cached there
	for obj, by := range sequencerCache(own, product).ByObject {
		gr := groupResource(t, s, obj)
		require.NotEmpty(t, by.Namespaces, "%s is cached across the cluster", gr)
		for ns := range by.Namespaces {
			marker, ok := stands[ns]
			require.True(t, ok, "%s is cached in %s, which no marker stands for", gr, ns)
			require.True(t, allows(roles[marker], gr, "list", "watch"), "%s is cached in %s, but the Role of %s does not allow list and watch", gr, ns, marker)
			cached[marker] = append(cached[marker], gr)
		}
	}
	for marker, role := range roles {
		if marker == "" {
			continue
		}
		for _, r := range role.Rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					gr := schema.GroupResource{Group: g, Resource: res}
					if allows(role, gr, "list", "watch") {
						require.Contains(t, cached[marker], gr, "the Role of %s allows list and watch on %s, which nothing caches there", marker, gr)
					}
				}
			}
		}
	}
	// What the reconciler reads through the cache across the cluster needs the ClusterRole.
	for _, obj := range []client.Object{&corev1.Pod{}, &policyv1.PodDisruptionBudget{}, &corev1.Node{},
		&v1beta1.UpgradePlan{}, &v1beta1.RepoNode{}, &v1beta1.Version{}} {
		gr := groupResource(t, s, obj)
		require.True(t, allows(roles[""], gr, "list", "watch"), "the ClusterRole does not allow list and watch on %s", gr)
	}
	// Without compatibility mode nothing is cached in the product's namespace.
	for obj, by := range sequencerCache(own, "").ByObject {
		require.Equal(t, []string{own}, mapsKeys(by.Namespaces), "%T", obj)
	}
}

// generatedRoles reads controller-gen's output: the ClusterRole under "" and each Role under its
// namespace.
func generatedRoles(t *testing.T, path string) map[string]rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]rbacv1.ClusterRole{}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		var role rbacv1.ClusterRole // a Role has the same fields
		require.NoError(t, yaml.Unmarshal([]byte(doc), &role))
		if role.Kind == "" {
			continue
		}
		require.Contains(t, []string{"ClusterRole", "Role"}, role.Kind)
		require.Equal(t, role.Kind == "Role", role.Namespace != "", "%s %s", role.Kind, role.Name)
		require.NotContains(t, out, role.Namespace, "two roles for namespace %q", role.Namespace)
		out[role.Namespace] = role
	}
	require.Contains(t, out, "", "no ClusterRole in %s", path)
	return out
}

// allows reports whether one of role's rules grants every verb on gr.
func allows(role rbacv1.ClusterRole, gr schema.GroupResource, verbs ...string) bool {
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, gr.Group) && slices.Contains(r.Resources, gr.Resource) &&
			!slices.ContainsFunc(verbs, func(v string) bool { return !slices.Contains(r.Verbs, v) }) {
			return true
		}
	}
	return false
}

// groupResource returns the API group and resource of obj's kind.
func groupResource(t *testing.T, s *runtime.Scheme, obj client.Object) schema.GroupResource {
	t.Helper()
	gvk, err := apiutil.GVKForObject(obj, s)
	require.NoError(t, err)
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	return plural.GroupResource()
}

// mapsKeys returns m's keys, sorted.
func mapsKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

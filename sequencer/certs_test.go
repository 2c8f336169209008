package sequencer_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// The serving certificate's expiry is read from a real TLS handshake with each control plane;
// the others are not asked, and one that does not answer is named.
func TestServingCertificates(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	host, portStr, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	port, err := strconv.Atoi(portStr)
	require.NoError(t, err)
	node := func(name string, cp bool, addr string) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if cp {
			n.Labels["node-role.kubernetes.io/control-plane"] = ""
		}
		if addr != "" {
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr}}
		}
		return n
	}
	certs, note := sequencer.ServingCertificates(t.Context(), []corev1.Node{
		node("cp-a", true, host), node("w-1", false, host), node("cp-b", true, ""),
	}, port)
	require.Len(t, certs, 1)
	require.Equal(t, "cp-a", certs[0].Node)
	require.Equal(t, sequencer.ServingCertificateName, certs[0].Name)
	require.True(t, certs[0].NotAfter.Equal(srv.Certificate().NotAfter), "the server's certificate's NotAfter")
	require.Equal(t, "not read from control plane cp-b (no internal address)", note)
}

package main

import (
	"fmt"

	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// clusterReader builds a client of the cluster k names (kubeRESTConfig), and one that asks its
// API server for its version.
func clusterReader(k kubeOptions) (client.Reader, discovery.ServerVersionInterface, error) {
	cfg, err := upgradeRESTConfig(k)
	if err != nil {
		return nil, nil, err
	}
	s, err := planScheme()
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, nil, fmt.Errorf("connect to the cluster: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to the cluster: %w", err)
	}
	return c, dc, nil
}

func planScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	if err := v1beta1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	return s, nil
}

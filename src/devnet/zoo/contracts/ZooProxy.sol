// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

/// A minimal transparent EIP-1967 proxy: the implementation and admin live in the standard
/// slots, the admin can only upgrade (its calls never reach the implementation), and everyone
/// else is delegated to the implementation.
contract ZooProxy {
    /// bytes32(uint256(keccak256("eip1967.proxy.implementation")) - 1)
    bytes32 private constant IMPLEMENTATION_SLOT = 0x360894a13ba1a3210667c828492db98dca3e2076cc3735a920a3ca505d382bbc;
    /// bytes32(uint256(keccak256("eip1967.proxy.admin")) - 1)
    bytes32 private constant ADMIN_SLOT = 0xb53127684a568b3173ae13b9f8a6016e243e63b6e8ee1178d6a717850b5d6103;

    event Upgraded(address indexed implementation);
    event AdminChanged(address previousAdmin, address newAdmin);

    error AdminCannotFallback();
    error InitializationFailed();

    constructor(address implementation, address admin, bytes memory initData) {
        _setImplementation(implementation);
        assembly {
            sstore(ADMIN_SLOT, admin)
        }
        emit AdminChanged(address(0), admin);
        if (initData.length > 0) {
            (bool ok, ) = implementation.delegatecall(initData);
            if (!ok) revert InitializationFailed();
        }
    }

    function upgradeTo(address implementation) external {
        if (msg.sender != _admin()) _delegate();
        _setImplementation(implementation);
    }

    function changeAdmin(address admin) external {
        if (msg.sender != _admin()) _delegate();
        emit AdminChanged(_admin(), admin);
        assembly {
            sstore(ADMIN_SLOT, admin)
        }
    }

    fallback() external payable {
        if (msg.sender == _admin()) revert AdminCannotFallback();
        _delegate();
    }

    receive() external payable {
        _delegate();
    }

    function _admin() private view returns (address a) {
        assembly {
            a := sload(ADMIN_SLOT)
        }
    }

    function _setImplementation(address implementation) private {
        assembly {
            sstore(IMPLEMENTATION_SLOT, implementation)
        }
        emit Upgraded(implementation);
    }

    function _delegate() private {
        assembly {
            let impl := sload(IMPLEMENTATION_SLOT)
            calldatacopy(0, 0, calldatasize())
            let ok := delegatecall(gas(), impl, 0, calldatasize(), 0, 0)
            returndatacopy(0, 0, returndatasize())
            switch ok
            case 0 {
                revert(0, returndatasize())
            }
            default {
                return(0, returndatasize())
            }
        }
    }
}
